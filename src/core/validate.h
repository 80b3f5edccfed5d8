// Argument validation: turns user arguments into a Problem or throws Error(invalid_argument) naming the rule.
#pragma once

#include "attnlab/attention.h"
#include "core/problem.h"

namespace attnlab::core {

Problem validate(const ForwardArgs& args);
Problem validate(const BackwardArgs& args);

}  // namespace attnlab::core
