//! Generated kernels executed on the host, against the CPU executor.
//!
//! CI has no GPU, and golden files pin text, not behaviour. Here each
//! kernel is compiled as C++20 under a CUDA shim and run: one host thread
//! per CUDA thread, `std::barrier` for `__syncthreads` and for each warp's
//! shuffles, blocks one after another. The helpers written in inline PTX
//! (loads with cache hints, vector stores, conversions, `%tid`) get host
//! bodies of the same meaning; `lf_exp` (the GPU's `ex2.approx`) becomes
//! `expf`, the executor's own, so every output must match the executor's
//! bit for bit (compiled without FMA on both sides): an index, a shift,
//! a guard or a reduction order that differs from the plan shows. Plans
//! whose kernels need the hardware (clusters, `cp.async`, `mbarrier`,
//! persistent grids) are left to the CUDA selftest.

use lanefold_codegen::{generate, CodegenOptions, Kernel, ParamKind};
use lanefold_cpu::data::{poisoned_outputs, random_inputs};
use lanefold_cpu::{execute, Buffers, Tensor};
use lanefold_ir::{DType, Operator, OperatorOptions};
use lanefold_plan::{plan, LayoutRequest, Plan, Problem, Target};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The CUDA names the kernels use, for the host (light: a kernel's file
/// compiles in a fraction of a second). Block-shared state lives in the
/// runtime; `threadIdx` and `blockIdx` are per host thread.
const HEADER: &str = r#"
#include <cstring>
#include <math.h>
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
template <class T, class... P> T lf_host_load(const T* p, P...) { return *p; }
template <class T> void lf_host_store(T* p, T v) { *p = v; }
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
        "lf_tid_again" => "inline int lf_tid_again() { return (int)threadIdx.x; }\n".to_string(),
        "lf_ctaid_again" => "inline int lf_ctaid_again() { return (int)blockIdx.x; }\n".to_string(),
        "lf_st" => "template <class T> void lf_st(T* p, T v) { *p = v; }\n".to_string(),
        n if n.starts_with("lf_policy_") => {
            format!("inline unsigned long long {n}() {{ return 0; }}\n")
        }
        n if n.starts_with("lf_ld_") => format!(
            "template <class T, class... P> T {n}(const T* p, P... pol) {{ return lf_host_load(p, pol...); }}\n"
        ),
        n if n.starts_with("lf_st_") => {
            format!("template <class T> void {n}(T* p, T v) {{ lf_host_store(p, v); }}\n")
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
        if !line.starts_with("__device__") {
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
    let out = out.replace("extern __shared__", "extern");
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

fn bytes(t: &Tensor) -> Vec<u8> {
    match t {
        Tensor::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        Tensor::Bf16(v) => v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect(),
        Tensor::F16(v) => v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect(),
        Tensor::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

fn tensor_like(t: &Tensor, b: &[u8]) -> Tensor {
    let u16s = || b.chunks(2).map(|c| u16::from_le_bytes([c[0], c[1]]));
    match t {
        Tensor::F32(_) => Tensor::F32(
            b.chunks(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect(),
        ),
        Tensor::Bf16(_) => Tensor::Bf16(u16s().map(half::bf16::from_bits).collect()),
        Tensor::F16(_) => Tensor::F16(u16s().map(half::f16::from_bits).collect()),
        Tensor::I64(_) => Tensor::I64(
            b.chunks(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                .collect(),
        ),
    }
}

/// Equal bits, or NaN on both sides (the payload is the conversion's).
fn same(a: &Tensor, b: &Tensor) -> Option<usize> {
    let n = a.len();
    if n != b.len() {
        return Some(0);
    }
    (0..n).find(|&i| match (a, b) {
        (Tensor::I64(x), Tensor::I64(y)) => x[i] != y[i],
        (Tensor::F32(x), Tensor::F32(y)) => {
            x[i].to_bits() != y[i].to_bits() && !(x[i].is_nan() && y[i].is_nan())
        }
        (Tensor::Bf16(x), Tensor::Bf16(y)) => {
            x[i].to_bits() != y[i].to_bits() && !(x[i].is_nan() && y[i].is_nan())
        }
        (Tensor::F16(x), Tensor::F16(y)) => {
            x[i].to_bits() != y[i].to_bits() && !(x[i].is_nan() && y[i].is_nan())
        }
        _ => true,
    })
}

struct Case {
    plan: Plan,
    kernel: Kernel,
    source: String,
    inputs: Buffers,
}

/// Kernels a host can run: no clusters, asynchronous copies, transaction
/// barriers or persistent grids.
fn runs_on_the_host(k: &Kernel) -> bool {
    k.cluster.is_none()
        && k.persistent_rows.is_none()
        && k.grid.1 == 1
        && k.grid.2 == 1
        && k.block.1 == 1
        && !["cp.async", "mbarrier", "griddepcontrol", "lf_smem_addr"]
            .iter()
            .any(|s| k.source.contains(s))
}

/// The layouts every operator runs in (schedule text; `auto` is the
/// default plan), and the variants that apply to some operators only.
const LAYOUTS: [&str; 6] = [
    "auto",
    "W=32 V=8 G=2",
    "W=128 V=4 U=2",
    "W=256 V=4 stream reread-hints",
    "W=32 V=8 aligned-packs",
    "W=64 V=4 stream aligned-packs",
];
const VARIANTS: [&str; 12] = [
    "W=64 V=4 online-normalizer",
    "W=128 V=4 stream online-normalizer aligned-packs",
    "W=64 V=4 one-pass-moments",
    "W=64 V=8 fused-output",
    "W=64 V=8 packed-resident",
    "W=64 V=4 hoisted-columns streaming-hints",
    "W=128 V=4 early-columns=2 batched-loads",
    "W=32 V=4 U=4 unfolded-addresses",
    "W=64 V=4 batch-invariant",
    "W=64 V=4 no-cold-path",
    "W=32 V=2 G=4 ordered-columns",
    "W=1 V=1",
];

fn cases() -> Vec<Case> {
    let target = Target::h200();
    let mut out = vec![];
    let mut ops = Operator::SIX.to_vec();
    ops.extend(Operator::training());
    for op in ops {
        for dtype in [DType::F32, DType::Bf16, DType::F16] {
            // f16 on the forward operators' default and layouts of one shape.
            let f16 = dtype == DType::F16;
            if f16 && !Operator::SIX.contains(&op) {
                continue;
            }
            // The gradients' shapes: one odd, one of partial chunks.
            let shapes: &[&str] = if op.forward().is_some() {
                &["3x1001", "2x4103"]
            } else {
                &["3x1001", "2x1002", "5x130", "2x4103"]
            };
            for &shape in shapes.iter().filter(|&&s| !f16 || s == "2x1002") {
                let problem = Problem::operator(
                    op,
                    OperatorOptions::default(),
                    dtype,
                    shape.parse().unwrap(),
                );
                // The variants on one shape each: their paths, not sizes.
                let variants = if shape == "3x1001" {
                    &VARIANTS[..]
                } else {
                    &[]
                };
                for text in LAYOUTS.iter().chain(variants) {
                    let request: LayoutRequest = match *text {
                        "auto" => LayoutRequest::default(),
                        t => t.parse().unwrap_or_else(|e| panic!("{t}: {e}")),
                    };
                    let Ok(p) = plan(&problem, &target, &request) else {
                        continue;
                    };
                    let options = CodegenOptions { fma: false };
                    let kernel = generate(&p, &options).unwrap();
                    if !runs_on_the_host(&kernel) {
                        continue;
                    }
                    let Some(source) = host_source(&kernel, dtype) else {
                        panic!("{op} {dtype:?} {shape} {text}: a helper without a host body");
                    };
                    let mut inputs = random_inputs(&problem, 7 + shape.len() as u64);
                    if p.cold_path() {
                        rows_for_the_cold_path(&mut inputs, p.shape().n);
                    }
                    out.push(Case {
                        plan: p,
                        kernel,
                        source,
                        inputs,
                    });
                }
            }
        }
    }
    out.sort_by(|a, b| a.source.cmp(&b.source));
    out.dedup_by(|a, b| a.source == b.source && a.plan.shape() == b.plan.shape());
    out
}

/// A norm's rows its fast statistics get wrong, so the cold path runs:
/// row 0 far from zero (4096 + 1e-2 x), row 1 at 1e30 (its sum of
/// squares overflows f32).
fn rows_for_the_cold_path(inputs: &mut Buffers, n: usize) {
    let edit = |v: f32, row: usize| {
        if row == 0 {
            4096.0 + 1e-2 * v
        } else {
            v * 1e30
        }
    };
    match inputs.get_mut("x") {
        Some(Tensor::F32(x)) => {
            for (i, v) in x.iter_mut().take(2 * n).enumerate() {
                *v = edit(*v, i / n);
            }
        }
        Some(Tensor::Bf16(x)) => {
            for (i, v) in x.iter_mut().take(2 * n).enumerate() {
                *v = half::bf16::from_f32(edit(v.to_f32(), i / n));
            }
        }
        // 1e30 is infinite in f16: the cold path's non-finite rows.
        Some(Tensor::F16(x)) => {
            for (i, v) in x.iter_mut().take(2 * n).enumerate() {
                *v = half::f16::from_f32(edit(v.to_f32(), i / n));
            }
        }
        _ => panic!("a norm's x"),
    }
}

fn cxx() -> Option<String> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let ok = Command::new(&cxx)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(cxx)
}

/// The compiler as every file here is compiled: C++20, no FMA contraction
/// (the kernels' sums are compared bit for bit), the header's folder.
fn compile(cxx: &str, dir: &Path) -> Command {
    let mut c = Command::new(cxx);
    c.args([
        "-std=c++20",
        "-O1",
        "-ffp-contract=off",
        "-w",
        "-pthread",
        "-I",
    ])
    .arg(dir);
    c
}

/// The header and the runtime's object in `dir`.
fn build_runtime(cxx: &str, dir: &Path) {
    std::fs::write(dir.join("lf_host.h"), HEADER).unwrap();
    let src = dir.join("runtime.cpp");
    std::fs::write(&src, format!("#include \"lf_host.h\"\n{RUNTIME}")).unwrap();
    let c = compile(cxx, dir)
        .arg("-c")
        .arg("-o")
        .arg(dir.join("runtime.o"))
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        c.status.success(),
        "the host runtime: {}",
        String::from_utf8_lossy(&c.stderr)
    );
}

/// Compile and run one case; its outputs, or why not.
fn run(cxx: &str, dir: &Path, k: usize, case: &Case) -> Result<Buffers, String> {
    let src = dir.join(format!("k{k}.cpp"));
    let exe = dir.join(format!("k{k}"));
    std::fs::write(&src, &case.source).unwrap();
    let c = compile(cxx, dir)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .arg(dir.join("runtime.o"))
        .output()
        .unwrap();
    if !c.status.success() {
        return Err(format!("c++: {}", String::from_utf8_lossy(&c.stderr)));
    }
    let mut outputs = poisoned_outputs(&case.plan.problem);
    let rows = case.plan.shape().rows as i32;
    let n = case.plan.shape().n as i32;
    let mut file = vec![];
    let mut put = |b: &[u8]| {
        file.extend((b.len() as u64).to_le_bytes());
        file.extend(b);
    };
    for p in &case.kernel.params {
        match p.kind {
            ParamKind::Input => put(&bytes(&case.inputs[&p.name])),
            ParamKind::Output => put(&bytes(&outputs[&p.name])),
            ParamKind::Rows => put(&rows.to_le_bytes()),
            ParamKind::N => put(&n.to_le_bytes()),
        }
    }
    let (fin, fout) = (dir.join(format!("k{k}.in")), dir.join(format!("k{k}.out")));
    std::fs::write(&fin, file).unwrap();
    let mut child = Command::new(&exe)
        .arg(&fin)
        .arg(&fout)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
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
    let back = std::fs::read(&fout).unwrap();
    let mut at = 0;
    for p in &case.kernel.params {
        let len = u64::from_le_bytes(back[at..at + 8].try_into().unwrap()) as usize;
        let b = &back[at + 8..at + 8 + len];
        at += 8 + len;
        if p.kind == ParamKind::Output {
            let t = tensor_like(&outputs[&p.name], b);
            outputs.insert(p.name.clone(), t);
        }
    }
    Ok(outputs)
}

#[test]
fn generated_kernels_run_on_the_host_give_the_cpu_executors_bits() {
    let Some(cxx) = cxx() else {
        eprintln!("no C++ compiler (CXX or c++): host execution skipped");
        return;
    };
    let cases = cases();
    eprintln!("{} kernels on the host", cases.len());
    let count = |s: &str| cases.iter().filter(|c| c.kernel.name.contains(s)).count();
    assert!(cases.len() >= 150, "{} cases", cases.len());
    assert!(count("_ap") >= 40, "aligned-pack kernels: {}", count("_ap"));
    assert!(
        count("_stream") >= 20,
        "streamed kernels: {}",
        count("_stream")
    );
    assert!(count("_cp") >= 20, "cold-path kernels: {}", count("_cp"));
    let dir: PathBuf =
        std::env::temp_dir().join(format!("lanefold-host-exec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    build_runtime(&cxx, &dir);
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let failures: Vec<String> = std::thread::scope(|s| {
        let chunks: Vec<Vec<(usize, &Case)>> = (0..workers)
            .map(|w| cases.iter().enumerate().skip(w).step_by(workers).collect())
            .collect();
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                let (cxx, dir) = (&cxx, &dir);
                s.spawn(move || {
                    let mut failed = vec![];
                    for (k, case) in chunk {
                        let what = format!("{} ({})", case.kernel.name, case.plan.describe());
                        let mut want = poisoned_outputs(&case.plan.problem);
                        execute(&case.plan, &case.inputs, &mut want).unwrap();
                        match run(cxx, dir, k, case) {
                            Ok(got) => {
                                for (name, w) in &want {
                                    if let Some(i) = same(w, &got[name]) {
                                        failed.push(format!(
                                            "{what}: {name}[{i}] host {} executor {}",
                                            got[name].get(i),
                                            w.get(i)
                                        ));
                                    }
                                }
                            }
                            Err(e) => failed.push(format!("{what}: {e}")),
                        }
                    }
                    failed
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        failures.is_empty(),
        "{} of {} kernels differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
