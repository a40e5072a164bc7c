//! Generated kernels executed on the host, for the tests that hold them
//! to the CPU's bits.
//!
//! Each kernel is compiled as C++20 under a CUDA shim and run: one host
//! thread per CUDA thread, `std::barrier` for `__syncthreads` and for each
//! warp's shuffles, blocks one after another. The helpers written in
//! inline PTX (loads with cache hints, vector stores, conversions, `%tid`)
//! get host bodies of the same meaning; `lf_exp` (the GPU's `ex2.approx`)
//! becomes `expf`, the CPU executor's own. Kernels that need the hardware
//! (clusters, `cp.async`, `mbarrier`, persistent grids) are not run here.

use lanefold_codegen::{Kernel, ParamKind};
use lanefold_ir::DType;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The CUDA names the kernels use, for the host (light: a kernel's file
/// compiles in a fraction of a second). Block-shared state lives in the
/// runtime; `threadIdx` and `blockIdx` are per host thread.
pub const HEADER: &str = r#"
// One light header: thousands of files include this one.
#include <cstddef>
extern "C" {
float sqrtf(float);
float expf(float);
float logf(float);
float fabsf(float);
float fmaxf(float, float);
}
#define memcpy __builtin_memcpy
#define __global__
#define __device__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__ static
struct lf_dim3 { unsigned x, y, z; };
extern thread_local lf_dim3 threadIdx, blockIdx;
extern lf_dim3 blockDim, gridDim;
struct uint2 { unsigned x, y; };
struct uint4 { unsigned x, y, z, w; };
struct float4 { float x, y, z, w; };
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline float rsqrtf(float a) { return 1.0f / sqrtf(a); }
[[noreturn]] void __trap();
void __syncthreads();
void __syncwarp(unsigned = 0xffffffffu);
// Lane `src` of this warp's value (this lane's own past the warp's end).
unsigned long long lf_exchange(unsigned long long bits, int src);
template <class T> T lf_shuffle(T v, int src) {
    unsigned long long bits = 0;
    memcpy(&bits, &v, sizeof(T));
    bits = lf_exchange(bits, src);
    memcpy(&v, &bits, sizeof(T));
    return v;
}
template <class T> T __shfl_xor_sync(unsigned, T v, int mask) { return lf_shuffle(v, (int)(threadIdx.x % 32) ^ mask); }
template <class T> T __shfl_sync(unsigned, T v, int src) { return lf_shuffle(v, src & 31); }
inline unsigned short lf_host_bf16(float x) {
    unsigned u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}
inline unsigned short lf_host_f16(float x) {
    _Float16 h = (_Float16)x;
    unsigned short b;
    memcpy(&b, &h, 2);
    return b;
}
// Runs `body(ctx)` as `threads` threads of each of `grid` blocks in turn.
void lf_run(unsigned grid, unsigned threads, void (*body)(void*), void* ctx);
void lf_host_launch(void** p);
"#;

/// The runtime and `main`, compiled once: `main` reads the buffers from
/// `argv[1]` (each a u64 byte count and its bytes, in parameter order),
/// runs the kernel and writes every buffer to `argv[2]`.
const RUNTIME: &str = r#"
#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>
thread_local lf_dim3 threadIdx, blockIdx;
lf_dim3 blockDim, gridDim;
struct lf_block {
    std::barrier<> all;
    std::vector<std::unique_ptr<std::barrier<>>> warps;
    unsigned long long slot[1024];
    explicit lf_block(unsigned threads) : all(threads) {
        for (unsigned w = 0; w * 32 < threads; ++w)
            warps.emplace_back(new std::barrier<>(std::min(32u, threads - w * 32)));
    }
};
static lf_block* lf_blk;
static std::barrier<>& lf_warp() { return *lf_blk->warps[threadIdx.x / 32]; }
void __trap() { fprintf(stderr, "__trap\n"); abort(); }
void __syncthreads() { lf_blk->all.arrive_and_wait(); }
void __syncwarp(unsigned) { lf_warp().arrive_and_wait(); }
unsigned long long lf_exchange(unsigned long long bits, int src) {
    const unsigned at = threadIdx.x / 32 * 32 + (unsigned)src;
    lf_blk->slot[threadIdx.x] = bits;
    lf_warp().arrive_and_wait();
    const unsigned long long out = at < blockDim.x ? lf_blk->slot[at] : bits;
    lf_warp().arrive_and_wait();
    return out;
}
void lf_run(unsigned grid, unsigned threads, void (*body)(void*), void* ctx) {
    gridDim = {grid, 1, 1};
    blockDim = {threads, 1, 1};
    for (unsigned b = 0; b < grid; ++b) {
        lf_block block(threads);
        lf_blk = &block;
        std::vector<std::thread> pool;
        for (unsigned t = 0; t < threads; ++t)
            pool.emplace_back([&, t] {
                threadIdx = {t, 0, 0};
                blockIdx = {b, 0, 0};
                body(ctx);
                // An exited thread no longer holds back a barrier.
                lf_warp().arrive_and_drop();
                block.all.arrive_and_drop();
            });
        for (auto& th : pool) th.join();
    }
}
int main(int argc, char** argv) {
    if (argc != 3) return 2;
    FILE* in = fopen(argv[1], "rb");
    std::vector<std::vector<unsigned char>> bufs;
    unsigned long long len;
    while (fread(&len, 8, 1, in) == 1) {
        bufs.emplace_back(len);
        if (fread(bufs.back().data(), 1, len, in) != len) return 3;
    }
    fclose(in);
    std::vector<void*> ptrs;
    for (auto& b : bufs) ptrs.push_back(b.data());
    lf_host_launch(ptrs.data());
    FILE* out = fopen(argv[2], "wb");
    for (auto& b : bufs) {
        len = b.size();
        fwrite(&len, 8, 1, out);
        fwrite(b.data(), 1, len, out);
    }
    fclose(out);
    return 0;
}
"#;

/// The host body of a helper written in inline PTX, by name (every
/// overload of it at once), or None for one this harness does not know.
fn host_helper(name: &str, dtype: DType) -> Option<String> {
    Some(match name {
        "lf_narrow" => match dtype {
            DType::Bf16 => "inline unsigned short lf_narrow(float x) { return lf_host_bf16(x); }\n",
            DType::F16 => "inline unsigned short lf_narrow(float x) { return lf_host_f16(x); }\n",
            DType::F32 => return None,
        }
        .to_string(),
        "lf_widen" if dtype == DType::F16 => {
            "inline float lf_widen(unsigned short h) { _Float16 x; memcpy(&x, &h, 2); return (float)x; }\n"
                .to_string()
        }
        "lf_exp" => "inline float lf_exp(float x) { return expf(x); }\n".to_string(),
        // bf16's `prmt` selects the same bits the shift and mask do.
        "lf_rewiden" => "template <unsigned P> inline float lf_rewiden(unsigned w, bool high) { return lf_widen_bits(high ? w >> 16 : w & 0xffffu); }\n"
            .to_string(),
        "lf_tid_again" => "inline int lf_tid_again() { return (int)threadIdx.x; }\n".to_string(),
        "lf_ctaid_again" => "inline int lf_ctaid_again() { return (int)blockIdx.x; }\n".to_string(),
        // Shared memory is host memory: an asynchronous copy is a copy,
        // complete before its wait.
        "lf_shared_addr" => "inline unsigned lf_shared_addr(const void*) { return 0; }\n".to_string(),
        n if n.starts_with("lf_cp_async_") => {
            format!("template <class T> void {n}(T* dst, const T* src) {{ *dst = *src; }}\n")
        }
        n if n.starts_with("lf_policy_") => {
            format!("inline unsigned long long {n}() {{ return 0; }}\n")
        }
        n if n.starts_with("lf_ld_") => format!(
            "template <class T, class... P> T {n}(const T* p, P...) {{ return *p; }}\n"
        ),
        // `lf_st` and the hinted `lf_st_*`: a plain store.
        n if n == "lf_st" || n.starts_with("lf_st_") => {
            format!("template <class T> void {n}(T* p, T v) {{ *p = v; }}\n")
        }
        _ => return None,
    })
}

/// The kernel's source for the host: every helper written in inline PTX
/// replaced by its host body (at its first overload), or None where one
/// has no host body.
fn host_source(kernel: &Kernel, dtype: DType) -> Option<String> {
    let lines: Vec<&str> = kernel.source.lines().collect();
    let mut out = String::new();
    let mut replaced: Vec<String> = vec![];
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let helper = line.starts_with("__device__")
            || (line.starts_with("template") && line.contains("__device__"));
        if !helper {
            out.push_str(line);
            out.push('\n');
            i += 1;
            continue;
        }
        // A helper: to its closing brace at depth zero.
        let mut depth = 0i32;
        let mut end = i;
        for (j, l) in lines.iter().enumerate().skip(i) {
            depth += l.matches('{').count() as i32 - l.matches('}').count() as i32;
            if depth == 0 && l.contains('}') {
                end = j;
                break;
            }
        }
        let text = lines[i..=end].join("\n");
        if text.contains("asm") {
            let head = line.split('(').next().unwrap_or_default();
            let name = head.split_whitespace().last()?.trim_start_matches('*');
            if !replaced.iter().any(|r| r == name) {
                out.push_str(&host_helper(name, dtype)?);
                replaced.push(name.to_string());
            }
        } else {
            out.push_str(&text);
            out.push('\n');
        }
        i = end + 1;
    }
    let mut out = out.replace("extern __shared__", "extern");
    for wait in ["cp.async.commit_group;", "cp.async.wait_all;"] {
        out = out.replace(
            &format!("asm volatile(\"{wait}\" ::: \"memory\")"),
            "(void)0",
        );
    }
    let args: Vec<String> = kernel
        .params
        .iter()
        .enumerate()
        .map(|(k, p)| match p.kind {
            ParamKind::Input | ParamKind::Output => {
                format!("reinterpret_cast<{}>(p[{k}])", p.c_type)
            }
            ParamKind::Rows | ParamKind::N => format!("*reinterpret_cast<int*>(p[{k}])"),
        })
        .collect();
    Some(format!(
        "#include \"lf_host.h\"\nalignas(16) float lf_smem[{floats}];\n{out}\nstatic void lf_body(void* ctx) {{\n    void** p = static_cast<void**>(ctx);\n    {name}({args});\n}}\nvoid lf_host_launch(void** p) {{ lf_run({grid}, {threads}, lf_body, p); }}\n",
        floats = (kernel.shared_bytes as usize / 4).max(4),
        grid = kernel.grid.0,
        threads = kernel.block.0,
        name = kernel.name,
        args = args.join(", "),
    ))
}

/// Kernels a host can run: no clusters, bulk copies, transaction barriers
/// or persistent grids (`cp.async` of shared chunks runs as a copy).
pub fn runs_on_the_host(k: &Kernel) -> bool {
    k.cluster.is_none()
        && k.persistent_rows.is_none()
        && k.grid.1 == 1
        && k.grid.2 == 1
        && k.block.1 == 1
        && !["mbarrier", "griddepcontrol", "cp.async.bulk", "mapa."]
            .iter()
            .any(|s| k.source.contains(s))
}

/// A C++20 compiler and a scratch folder holding the compiled runtime;
/// the folder goes when this does.
pub struct Host {
    cxx: String,
    dir: PathBuf,
}

impl Host {
    /// None where no C++20 compiler (`CXX`, else `c++`) builds the runtime.
    pub fn new(tag: &str) -> Option<Host> {
        let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
        let dir = std::env::temp_dir().join(format!("lanefold-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let host = Host { cxx, dir };
        std::fs::write(host.dir.join("lf_host.h"), HEADER).ok()?;
        let src = host.dir.join("runtime.cpp");
        std::fs::write(&src, format!("#include \"lf_host.h\"\n{RUNTIME}")).ok()?;
        let built = host
            .compile()
            .arg("-c")
            .arg("-o")
            .arg(host.dir.join("runtime.o"))
            .arg(&src)
            .output()
            .is_ok_and(|o| o.status.success());
        built.then_some(host)
    }

    /// The compiler as every file here is compiled: C++20, no FMA
    /// contraction (sums are compared bit for bit), the header's folder.
    fn compile(&self) -> Command {
        let mut c = Command::new(&self.cxx);
        c.args([
            "-std=c++20",
            "-O1",
            "-ffp-contract=off",
            "-w",
            "-pthread",
            "-I",
        ])
        .arg(&self.dir);
        c
    }

    /// Compile `kernel` (storage `dtype`) as `id`, run it on `buffers` (one
    /// per parameter, in order: the pointers' bytes, then `rows` and `n`
    /// as 4-byte ints) and give every buffer back as the kernel left it.
    pub fn run(
        &self,
        id: &str,
        kernel: &Kernel,
        dtype: DType,
        buffers: &[Vec<u8>],
    ) -> Result<Vec<Vec<u8>>, String> {
        let source = host_source(kernel, dtype).ok_or("a helper without a host body")?;
        let (src, exe) = (self.dir.join(format!("{id}.cpp")), self.dir.join(id));
        std::fs::write(&src, source).map_err(|e| e.to_string())?;
        let c = self
            .compile()
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .arg(self.dir.join("runtime.o"))
            .output()
            .map_err(|e| e.to_string())?;
        if !c.status.success() {
            return Err(format!("c++: {}", String::from_utf8_lossy(&c.stderr)));
        }
        let mut file = vec![];
        for b in buffers {
            file.extend((b.len() as u64).to_le_bytes());
            file.extend(b);
        }
        let (fin, fout) = (
            self.dir.join(format!("{id}.in")),
            self.dir.join(format!("{id}.out")),
        );
        std::fs::write(&fin, file).map_err(|e| e.to_string())?;
        let mut child = Command::new(&exe)
            .arg(&fin)
            .arg(&fout)
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?;
        let deadline = Instant::now() + Duration::from_secs(120);
        let status = loop {
            if let Some(s) = child.try_wait().map_err(|e| e.to_string())? {
                break s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return Err("no exit within 120 s (a barrier some thread never reaches?)".into());
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        if !status.success() {
            return Err(format!("exit {status}"));
        }
        let back = std::fs::read(&fout).map_err(|e| e.to_string())?;
        let mut out = vec![];
        let mut at = 0;
        while at + 8 <= back.len() {
            let len = u64::from_le_bytes(back[at..at + 8].try_into().unwrap()) as usize;
            out.push(back[at + 8..at + 8 + len].to_vec());
            at += 8 + len;
        }
        Ok(out)
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A kernel's parameters as `Host::run` takes them: each pointer's bytes
/// from `bytes(name)`, then `rows` and `n`.
pub fn param_buffers(
    kernel: &Kernel,
    rows: usize,
    n: usize,
    mut bytes: impl FnMut(&str) -> Vec<u8>,
) -> Vec<Vec<u8>> {
    kernel
        .params
        .iter()
        .map(|p| match p.kind {
            ParamKind::Input | ParamKind::Output => bytes(&p.name),
            ParamKind::Rows => (rows as i32).to_le_bytes().to_vec(),
            ParamKind::N => (n as i32).to_le_bytes().to_vec(),
        })
        .collect()
}
