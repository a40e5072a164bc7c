//! The column-gradient kernels run on the host: their CUDA source under a
//! shim (a std::thread per CUDA thread, a barrier for `__syncthreads`,
//! correctly rounded f32 operations) must give the CPU's column sums bit
//! for bit (f32 storage: the 16-bit conversions are inline PTX, which only
//! NVRTC and the device check). Skipped without a C++20 compiler.

use lanefold_codegen::{column_grad_kernels, column_partials_len, ColumnGradKind};
use lanefold_cpu::columns::column_grads;
use lanefold_cpu::{Buffers, Tensor};
use lanefold_ir::{DType, Operator};
use std::path::Path;
use std::process::Command;

const SHIM: &str = r#"
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__ static
struct lf_dim3 { unsigned x, y, z; };
thread_local lf_dim3 threadIdx, blockIdx;
static std::barrier<>* lf_barrier;
inline void __syncthreads() { lf_barrier->arrive_and_wait(); }
inline void __trap() { std::abort(); }
inline int min(int a, int b) { return a < b ? a : b; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float __int_as_float(unsigned u) { return __uint_as_float(u); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
"#;

/// Run `body(block)` for every block of `grid`, `threads` std::threads per
/// block sharing one barrier.
const LAUNCH: &str = r#"
template <class F> void lf_launch(unsigned grid, unsigned threads, F body) {
    for (unsigned b = 0; b < grid; ++b) {
        std::barrier<> bar(threads);
        lf_barrier = &bar;
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < threads; ++t)
            ts.emplace_back([=] { blockIdx = {b, 0, 0}; threadIdx = {t, 0, 0}; body(); });
        for (auto& t : ts) t.join();
    }
}
static std::vector<float> lf_read(const char* path, size_t len) {
    std::vector<float> v(len);
    FILE* f = std::fopen(path, "rb");
    if (!f || std::fread(v.data(), 4, len, f) != len) std::abort();
    std::fclose(f);
    return v;
}
"#;

fn host_run(
    dir: &Path,
    kind: ColumnGradKind,
    rows: usize,
    n: usize,
    eps: f32,
    inputs: &Buffers,
) -> Vec<Vec<f32>> {
    let [p, c] = column_grad_kernels(kind, DType::F32, rows, n, eps).unwrap();
    let layer = kind == ColumnGradKind::Layernorm;
    for name in ["x", "dy"] {
        std::fs::write(dir.join(format!("{name}.bin")), inputs[name].as_bytes()).unwrap();
    }
    // The two kernels' sources each define the shared macros and helpers:
    // one translation unit per kernel, macros undone between them.
    let strip = |s: &str| {
        s.lines()
            .filter(|l| !l.starts_with("typedef") && !l.starts_with("__device__"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let helpers = "typedef float lf_store_t;\ninline float lf_widen(float x) { return x; }\ninline float lf_narrow(float x) { return x; }\n";
    let plen = column_partials_len(kind, rows, n);
    let outputs = if layer {
        "dw.data(), db.data()"
    } else {
        "dw.data()"
    };
    let main = format!(
        "int main(int, char** argv) {{
    std::vector<float> x = lf_read(argv[1], {len}), dy = lf_read(argv[2], {len});
    std::vector<float> partials({plen}), dw({n}), db({n});
    lf_launch({pg}, {pb}, [&] {{ {pn}(x.data(), dy.data(), partials.data(), {rows}, {n}); }});
    lf_launch({cg}, {cb}, [&] {{ {cn}(partials.data(), {outputs}, {rows}, {n}); }});
    std::fwrite(dw.data(), 4, {n}, stdout);
    std::fwrite(db.data(), 4, {n}, stdout);
    return 0;
}}
",
        len = rows * n,
        pg = p.grid.0,
        pb = p.block.0,
        pn = p.name,
        cg = c.grid.0,
        cb = c.block.0,
        cn = c.name,
    );
    let undef = "#undef LF_N\n#undef LF_ROWS\n#undef LF_GROUPS\n";
    let source = format!(
        "{SHIM}{helpers}{LAUNCH}{}\n{undef}{}\n{undef}{main}",
        strip(&p.source),
        strip(&c.source)
    );
    let cpp = dir.join("k.cpp");
    let exe = dir.join("k");
    std::fs::write(&cpp, source).unwrap();
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let out = Command::new(&cxx)
        .args([
            "-std=c++20",
            "-O1",
            "-ffp-contract=off",
            "-pthread",
            "-w",
            "-o",
        ])
        .arg(&exe)
        .arg(&cpp)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe)
        .arg(dir.join("x.bin"))
        .arg(dir.join("dy.bin"))
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let floats: Vec<f32> = run
        .stdout
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(floats.len(), 2 * n);
    vec![floats[..n].to_vec(), floats[n..].to_vec()]
}

fn cxx20() -> bool {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let dir = std::env::temp_dir().join(format!("lanefold-cxx20-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let probe = dir.join("p.cpp");
    std::fs::write(
        &probe,
        "#include <barrier>\nint main() { std::barrier<> b(1); }\n",
    )
    .unwrap();
    let ok = Command::new(cxx)
        .args(["-std=c++20", "-fsyntax-only"])
        .arg(&probe)
        .output()
        .is_ok_and(|o| o.status.success());
    let _ = std::fs::remove_dir_all(&dir);
    ok
}

#[test]
fn the_column_kernels_give_the_cpus_column_sums_bit_for_bit() {
    if !cxx20() {
        eprintln!("SKIPPED: no C++20 compiler (set CXX)");
        return;
    }
    /// Removes the scratch folder, a failed assertion included.
    struct Scratch(std::path::PathBuf);
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let scratch =
        Scratch(std::env::temp_dir().join(format!("lanefold-colgrad-{}", std::process::id())));
    let dir = &scratch.0;
    std::fs::create_dir_all(dir).unwrap();
    for (kind, op, eps) in [
        (
            ColumnGradKind::Layernorm,
            Operator::LayernormBackward,
            1e-5f32,
        ),
        (ColumnGradKind::Rmsnorm, Operator::RmsnormBackward, 1e-6),
    ] {
        // One group, a partial last group, several column stripes.
        for (rows, n) in [(1, 1), (70, 300), (33, 517)] {
            let values = |seed: u32| -> Vec<f32> {
                (0..rows * n)
                    .map(|i| {
                        ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 4001) as f32
                            / 1000.0
                            - 2.0
                    })
                    .collect()
            };
            let inputs = Buffers::from([
                ("x".to_string(), Tensor::F32(values(1))),
                ("dy".to_string(), Tensor::F32(values(7))),
            ]);
            let want = column_grads(op, &inputs, rows, n, eps, DType::F32).unwrap();
            let got = host_run(dir, kind, rows, n, eps, &inputs);
            for (k, name) in ["dweight", "dbias"].iter().enumerate() {
                let Some(w) = want.get(*name) else { continue };
                let same = (0..n).all(|j| w.get(j).to_bits() == got[k][j].to_bits());
                assert!(
                    same,
                    "{kind:?} {rows}x{n} {name}: {:?} against {:?}",
                    &got[k][..n.min(4)],
                    (0..n.min(4)).map(|j| w.get(j)).collect::<Vec<_>>()
                );
            }
        }
    }
}
