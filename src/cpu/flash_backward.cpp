// cpu-flash backward driver. Two phases, each parallel over independent tasks:
//   1. D = rowsum(dO ∘ O) for every query row (B·N·T floats: the only buffer that grows, and only with T), in the
//      kernels' arithmetic (flash_backward_kernel.h, backward_row_dots, says why);
//   2. one task list holding both the dK/dV tasks (batch, KV head, block of Bc keys) and the dQ tasks (batch, query
//      head, block of Br rows). Each gradient element has exactly one owner, so there are no atomics and no
//      per-thread copies of dQ.
#include <vector>

#include "core/parallel.h"
#include "cpu/flash_plan.h"

namespace attnlab::cpu::flash {

void run_backward(const Kernels& kernels, Context::Impl& ctx, const core::Problem& p) {
  const core::Dims& d = p.dims;
  const int threads = ctx.threads();
  const std::int64_t heads = d.B * d.N;
  const std::int64_t q_blocks = (d.T + kBr - 1) / kBr;
  const std::int64_t k_blocks = (d.S + kBc - 1) / kBc;
  const std::int64_t key_tasks = d.B * d.K * k_blocks;
  const std::int64_t query_tasks = heads * q_blocks;
  const std::int64_t tasks = key_tasks + query_tasks;

  // Everything is allocated before the first write.
  std::vector<float> d_sum(std::size_t(heads * d.T));
  const std::size_t scratch = std::max({QueryScratch(d).total, KeyScratch(d).total, RowDotsScratch(d).total});
  const Workspace ws(core::parallel_workers(std::max(tasks, heads), threads), scratch);

  core::parallel_for(ctx.pool, heads, threads, [&](std::int64_t bn, int worker) {
    kernels.backward_row_dots(p, bn / d.N, bn % d.N, d_sum.data() + bn * d.T, ws.worker(worker));
  });

  core::parallel_for(ctx.pool, tasks, threads, [&](std::int64_t task, int worker) {
    float* scratch_w = ws.worker(worker);
    if (task < key_tasks) {
      const std::int64_t kb = task % k_blocks, bk = task / k_blocks;
      const KeyBlock blk{bk / d.K, bk % d.K, kb * kBc, std::min<std::int64_t>((kb + 1) * kBc, d.S)};
      kernels.backward_key_block(p, d_sum.data(), blk, scratch_w);
    } else {
      const std::int64_t t = task - key_tasks;
      const std::int64_t bn = t / q_blocks, qb = q_blocks - 1 - t % q_blocks;  // head-major, as in forward
      const QueryBlock blk{bn / d.N, bn % d.N, qb * kBr, std::min<std::int64_t>((qb + 1) * kBr, d.T)};
      kernels.backward_query_block(p, d_sum.data(), blk, scratch_w);
    }
  });
}

}  // namespace attnlab::cpu::flash
