// cpu-flash forward driver: one task per (batch, query head, block of Br query rows). Tasks write disjoint O/LSE
// rows, so they need no synchronization; parallel_for hands them out one at a time, which balances causal masks.
#include "core/parallel.h"
#include "cpu/flash_plan.h"

namespace attnlab::cpu::flash {

void run_forward(const Kernels& kernels, Context::Impl& ctx, const core::Problem& p) {
  const core::Dims& d = p.dims;
  const std::int64_t blocks = (d.T + kBr - 1) / kBr;
  const std::int64_t heads = d.B * d.N;
  const std::int64_t tasks = heads * blocks;
  const int threads = ctx.threads();
  const Workspace ws(core::parallel_workers(tasks, threads), QueryScratch(d).total);  // may throw: nothing written yet

  core::parallel_for(ctx.pool, tasks, threads, [&](std::int64_t task, int worker) {
    // Head-major: consecutive tasks (which the workers take in turn) share one head's K and V, so those stay in L2
    // instead of streaming from L3 for every query block. Within a head, the last query blocks first: under a
    // top-left causal mask they see the most keys.
    const std::int64_t bn = task / blocks;
    const std::int64_t qb = blocks - 1 - task % blocks;
    const QueryBlock blk{bn / d.N, bn % d.N, qb * kBr, std::min<std::int64_t>((qb + 1) * kBr, d.T)};
    kernels.forward_block(p, blk, ws.worker(worker));
  });
}

}  // namespace attnlab::cpu::flash
