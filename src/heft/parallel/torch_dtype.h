// The communicator's element type of a torch scalar type: the one map, shared by
// parallel::ProcessGroup (which refuses any other dtype) and the Python backend
// (python/heft/torch, which stages bool through int32). Header-only, so the extension
// compiles the same map.
//
// Deliberately left out: complex and bool (the communicator does not reduce them: Gloo
// refuses bool; callers decide whether to refuse or convert), and the quantized types.
#pragma once

#include <c10/core/ScalarType.h>

#include <optional>

#include "heft/comm/dtype.h"

namespace heft::parallel {

// The DataType the communicator moves `t` as: Float f32, Double f64, Half f16, BFloat16 bf16,
// Char (int8) i8, Byte (uint8) u8, Short (int16) i16, Int i32, Long i64; nullopt for any
// other scalar type. Never throws.
inline std::optional<comm::DataType> comm_dtype_of(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float: return comm::DataType::f32;
    case c10::ScalarType::Double: return comm::DataType::f64;
    case c10::ScalarType::Half: return comm::DataType::f16;
    case c10::ScalarType::BFloat16: return comm::DataType::bf16;
    case c10::ScalarType::Int: return comm::DataType::i32;
    case c10::ScalarType::Long: return comm::DataType::i64;
    case c10::ScalarType::Char: return comm::DataType::i8;
    case c10::ScalarType::Byte: return comm::DataType::u8;
    case c10::ScalarType::Short: return comm::DataType::i16;
    default: return std::nullopt;
  }
}

}  // namespace heft::parallel
