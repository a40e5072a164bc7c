// The pushed cluster reduction's mbarrier protocol alone, for
// compute-sanitizer's synccheck at each cluster size (see
// synccheck-clusters.sh). Each CTA arms one mbarrier for 4 * C bytes, the
// cluster meets once, then the CTA's threads 0..C-1 st.async one float each,
// completing the mbarrier they write beside; every thread waits for phase 0.
//   mode 0 (as lanefold): thread t pushes this CTA's value to CTA t
//   mode 1 (no remote push): thread t pushes into this CTA's own slot t
// Usage: synccheck-clusters C MODE   (C = 2, 4, 8 or 16; exit 1 on a wrong sum)
#ifndef __CUDACC_RTC__
#include <cstdio>
#include <cstdlib>
#endif

// The kernel needs no header (NVRTC compiles it alone in CI's check).
__device__ __forceinline__ unsigned shared_addr(const void* p) {
    unsigned long long a;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
    return static_cast<unsigned>(a);
}

extern "C" __global__ void push_kernel(float* out, int mode) {
    __shared__ alignas(8) unsigned long long bar;
    __shared__ float slots[16];
    unsigned rank, c;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(c));
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(shared_addr(&bar)) : "memory");
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                     :: "r"(shared_addr(&bar)), "r"(4 * c) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
    if (threadIdx.x < c) {
        const unsigned dst = mode == 0 ? threadIdx.x : rank;
        const unsigned slot = mode == 0 ? rank : threadIdx.x;
        unsigned remote_slot, remote_bar;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote_slot) : "r"(shared_addr(&slots[slot])), "r"(dst));
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote_bar) : "r"(shared_addr(&bar)), "r"(dst));
        const float v = static_cast<float>(rank + 1);
        asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];"
                     :: "r"(remote_slot), "f"(v), "r"(remote_bar) : "memory");
    }
    asm volatile("{\n.reg .pred done;\nWAIT:\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], 0;\n@!done bra WAIT;\n}"
                 :: "r"(shared_addr(&bar)) : "memory");
    float sum = 0.0f;
    for (unsigned i = 0; i < c; ++i) sum += slots[i];
    // No CTA leaves while another may still push into it.
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
    if (threadIdx.x == 0) out[blockIdx.x] = sum;
}

#ifndef __CUDACC_RTC__
int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s C MODE\n", argv[0]);
        return 2;
    }
    const int c = std::atoi(argv[1]);
    const int mode = std::atoi(argv[2]);
    if ((c != 2 && c != 4 && c != 8 && c != 16) || (mode != 0 && mode != 1)) {
        std::fprintf(stderr, "C is 2, 4, 8 or 16; MODE 0 or 1\n");
        return 2;
    }
    const int clusters = 16;
    const int blocks = c * clusters;
    float* out = nullptr;
    if (cudaMalloc(&out, blocks * sizeof(float)) != cudaSuccess) return 2;
    if (c > 8 && cudaFuncSetAttribute(push_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
        std::fprintf(stderr, "cluster size %d not allowed here\n", c);
        return 2;
    }
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(blocks);
    config.blockDim = dim3(128);
    cudaLaunchAttribute attribute;
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = c;
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
    cudaError_t err = cudaLaunchKernelEx(&config, push_kernel, out, mode);
    if (err == cudaSuccess) err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
        std::printf("C=%d mode=%d: %s\n", c, mode, cudaGetErrorString(err));
        return 1;
    }
    float host[256];
    cudaMemcpy(host, out, blocks * sizeof(float), cudaMemcpyDeviceToHost);
    int wrong = 0;
    for (int b = 0; b < blocks; ++b) {
        const int rank = b % c;
        const float want = mode == 0 ? c * (c + 1) / 2.0f : static_cast<float>(c * (rank + 1));
        wrong += host[b] != want;
    }
    std::printf("C=%d mode=%d: %d of %d CTAs summed wrong\n", c, mode, wrong, blocks);
    return wrong == 0 ? 0 : 1;
}
#endif
