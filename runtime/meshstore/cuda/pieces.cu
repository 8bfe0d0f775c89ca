#include "meshstore/cuda/pieces.cuh"

namespace meshstore::internal::cuda {
namespace {

// Bytes of one piece a block copies (the grid's y dimension walks them).
constexpr std::uint64_t kChunk = std::uint64_t{64} << 10;

// Blocks stride over the pieces (x) and over each piece's chunks (y);
// threads over a chunk's bytes, 16 at a time where both sides allow.
template <bool Gather>
__global__ void piece_copy(const PieceCopy* table, std::uint64_t count, std::uint64_t chunk,
                           unsigned char* staging) {
  for (std::uint64_t p = blockIdx.x; p < count; p += gridDim.x) {
    const PieceCopy c = table[p];
    for (std::uint64_t begin = blockIdx.y * chunk; begin < c.n; begin += gridDim.y * chunk) {
      const std::uint64_t end = begin + chunk < c.n ? begin + chunk : c.n;
      unsigned char* piece = reinterpret_cast<unsigned char*>(c.device);
      unsigned char* dst = (Gather ? staging + c.at : piece) + begin;
      const unsigned char* src = (Gather ? piece : staging + c.at) + begin;
      const std::uint64_t len = end - begin;
      std::uint64_t done = 0;
      if (((reinterpret_cast<std::uintptr_t>(dst) | reinterpret_cast<std::uintptr_t>(src)) & 15) ==
          0) {
        const std::uint64_t words = len / 16;
        auto* d = reinterpret_cast<uint4*>(dst);
        const auto* s = reinterpret_cast<const uint4*>(src);
        for (std::uint64_t i = threadIdx.x; i < words; i += blockDim.x) d[i] = s[i];
        done = words * 16;
      }
      for (std::uint64_t i = done + threadIdx.x; i < len; i += blockDim.x) dst[i] = src[i];
    }
  }
}

}  // namespace

cudaError_t launch_piece_copy(const PieceCopy* table, std::size_t count, std::uint64_t largest,
                              void* staging, bool gather, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  constexpr unsigned kThreads = 256;
  const std::uint64_t pieces = count < (1u << 20) ? count : (1u << 20);
  const std::uint64_t chunks = (largest + kChunk - 1) / kChunk;
  const dim3 grid(static_cast<unsigned>(pieces),
                  static_cast<unsigned>(chunks == 0 ? 1 : (chunks < 1024 ? chunks : 1024)));
  auto* s = static_cast<unsigned char*>(staging);
  if (gather) {
    piece_copy<true><<<grid, kThreads, 0, stream>>>(table, count, kChunk, s);
  } else {
    piece_copy<false><<<grid, kThreads, 0, stream>>>(table, count, kChunk, s);
  }
  return cudaGetLastError();
}

}  // namespace meshstore::internal::cuda
