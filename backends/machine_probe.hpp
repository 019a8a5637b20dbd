// The machine's measured peaks, against which bench reports "% of peak" and a roofline:
// OpenBLAS sgemm on square matrices, a STREAM-style triad and a read stream, at the current
// thread count.
#pragma once

namespace mosaic {

/// Best-of-`runs` GFLOP/s of an n x n x n OpenBLAS sgemm (after one warm-up run).
double probe_sgemm_gflops(int n = 2048, int runs = 3);
/// The same with oneDNN's dnnl_sgemm (its JIT kernels may use a wider ISA than OpenBLAS's core).
double probe_onednn_sgemm_gflops(int n = 2048, int runs = 3);
/// The same for oneDNN's matmul of bfloat16 operands into float32 (bf16 plans' products); 0
/// without oneDNN.
double probe_bf16_gemm_gflops(int n = 2048, int runs = 3);
/// The bytes of the largest CPU cache (sysconf's level 3, else level 2; 0 if unknown).
long long last_level_cache_bytes();
/// The working set of the memory probes below, in MiB: four times the last-level cache, at
/// least 256 MiB, at most an eighth of the physical memory. A fixed 256 MiB (the read probe's
/// size until 2026-12-07) fits in the 300 MiB level-3 cache of the Xeons these VMs run on, and
/// then measures the cache as much as the memory.
int memory_probe_mib();
/// Best-of-`runs` GB/s of a[i] = b[i] + s * c[i] over three arrays of `mib` MiB each
/// (3 x 4 bytes moved per element; no write-allocate traffic counted); 0: a third of
/// memory_probe_mib() each.
double probe_triad_gbs(int mib = 0, int runs = 5);
/// Best-of-`runs` GB/s of reading one `mib` MiB array (summed), each thread reading its
/// half as eight sequential streams side by side, as a weight stream is read (a decoder's
/// step at batch 1: common/gemv.hpp). One stream per thread reaches about two thirds of it.
/// 0: memory_probe_mib().
double probe_read_gbs(int mib = 0, int runs = 5);

}  // namespace mosaic
