//! The CUDA C emitter.

use crate::{CodegenError, CodegenOptions, Kernel, Param, ParamKind};
use lanefold_ir::{
    BinaryOp, BufferKind, DType, Instr, Kind, Program, ReduceOp, RowStat, UnaryOp, Value,
};
use lanefold_plan::{vector_access, ColumnStage, Plan, Residency, RowPrefetch};
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// `lf_<program>_<dtype>_w<W>_v<V>_u<U>_g<G>[_stream][_c<C>]` and one
/// suffix per load policy or arithmetic variant.
pub fn kernel_name(plan: &Plan) -> String {
    let l = &plan.layout;
    let mut name = format!(
        "lf_{}_{}_w{}_v{}_u{}_g{}",
        ident(&plan.problem.program.name),
        plan.dtype().name(),
        l.workers,
        l.pack,
        l.unroll,
        l.rows_per_group
    );
    if plan.rereads_tiles() {
        name += "_stream";
    }
    if plan.in_place {
        name += "_ip";
    }
    if plan.groups_per_row > 1 {
        name += &format!("_c{}", plan.groups_per_row);
    }
    if plan.streaming_hints {
        name += "_cs";
    }
    if plan.hoisted_columns {
        name += "_hc";
    }
    if plan.reread_hints {
        name += "_rr";
    }
    if plan.keep_columns {
        name += "_kc";
    }
    if plan.l1_columns {
        name += "_l1c";
    }
    if plan.unfolded_pack_addresses() {
        name += "_uf";
    }
    if plan.ordered_columns {
        name += "_oc";
    }
    if plan.early_columns > 0 {
        name += &format!("_ec{}", plan.early_columns);
    }
    if plan.l2_prefetch_rows > 0 {
        name += &format!("_l2p{}", plan.l2_prefetch_rows);
    }
    if let Some(shared) = plan.shared_chunks {
        name += &format!("_sh{}", shared.chunks);
    }
    if let Some(stage) = plan.column_stage {
        name += "_sc";
        if stage.columns < plan.problem.program.column_inputs().count() {
            name += &stage.columns.to_string();
        }
    }
    if plan.packed_resident {
        name += "_pk";
    }
    if plan.rounded_resident {
        name += "_rt";
    }
    if plan.computed_resident {
        name += "_ct";
    }
    if plan.relaxed_cluster_exit {
        name += "_rx";
    }
    if plan.pushed_cluster_reduce {
        name += "_pr";
    }
    if plan.persistent_clusters {
        name += "_pc";
    }
    if plan.row_prefetch.is_some() {
        name += "_pf";
    }
    if let Some(groups) = plan.min_groups_per_multiprocessor {
        name += &format!("_ob{groups}");
    }
    if let Some(cap) = plan.occupancy_cap {
        name += &format!("_cap{}", cap.groups);
    }
    if plan.online_normalizer() {
        name += "_on";
    }
    if plan.one_pass_moments() {
        name += "_om";
    }
    if plan.fused_output() {
        name += "_fo";
    }
    if plan.cold_path() {
        name += "_cp";
    }
    if plan.batched_loads {
        name += "_bl";
    }
    if plan.unguarded_stores {
        name += "_ug";
    }
    if plan.recompute_derived {
        name += "_rd";
    }
    if plan.aligned_packs {
        name += "_ap";
    }
    name
}

/// A C identifier made from any text.
fn ident(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

/// A float literal that parses back to exactly `x`.
fn lit(x: f32) -> String {
    if x.is_finite() {
        let s = format!("{x:?}");
        if s.contains(['.', 'e']) {
            format!("{s}f")
        } else {
            format!("{s}.0f")
        }
    } else {
        format!("__int_as_float(0x{:08x})", x.to_bits())
    }
}

fn identity(op: ReduceOp) -> String {
    lit(op.identity())
}

fn combine(op: ReduceOp, a: &str, b: &str) -> String {
    match op {
        ReduceOp::Sum => format!("{a} + {b}"),
        ReduceOp::Max => format!("fmaxf({a}, {b})"),
    }
}

fn unary(op: UnaryOp, a: &str) -> String {
    match op {
        UnaryOp::Neg => format!("-{a}"),
        UnaryOp::Exp => format!("lf_exp({a})"),
        UnaryOp::Log => format!("logf({a})"),
        UnaryOp::Sqrt => format!("sqrtf({a})"),
        UnaryOp::Rsqrt => format!("rsqrtf({a})"),
        UnaryOp::Recip => format!("1.0f / {a}"),
        UnaryOp::Square => format!("{a} * {a}"),
    }
}

fn binary(op: BinaryOp, a: &str, b: &str) -> String {
    match op {
        BinaryOp::Add => format!("{a} + {b}"),
        BinaryOp::Sub => format!("{a} - {b}"),
        BinaryOp::Mul => format!("{a} * {b}"),
        BinaryOp::Div => format!("{a} / {b}"),
        BinaryOp::Max => format!("fmaxf({a}, {b})"),
    }
}

/// Storage helpers: `lf_widen` (storage to f32), `lf_narrow` (f32 to
/// storage, round to nearest even) and `lf_round` (through storage and
/// back). No headers: the 16-bit conversions are inline PTX.
pub(crate) fn storage_helpers(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => {
            "typedef float lf_store_t;
__device__ __forceinline__ float lf_widen(float x) { return x; }
__device__ __forceinline__ float lf_narrow(float x) { return x; }
__device__ __forceinline__ float lf_round(float x) { return x; }
__device__ __forceinline__ float lf_widen_bits(unsigned b) { return __uint_as_float(b); }
__device__ __forceinline__ unsigned lf_bits(float x) { return __float_as_uint(x); }
"
        }
        DType::Bf16 => {
            "typedef unsigned short lf_store_t;
__device__ __forceinline__ float lf_widen(unsigned short h) { return __uint_as_float(((unsigned)h) << 16); }
__device__ __forceinline__ unsigned short lf_narrow(float x) {
    unsigned short h;
    asm(\"cvt.rn.bf16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(x));
    return h;
}
__device__ __forceinline__ float lf_round(float x) { return lf_widen(lf_narrow(x)); }
__device__ __forceinline__ float lf_widen_bits(unsigned b) { return lf_widen((unsigned short)b); }
__device__ __forceinline__ unsigned lf_bits(float x) { return (unsigned)lf_narrow(x); }
"
        }
        DType::F16 => {
            "typedef unsigned short lf_store_t;
__device__ __forceinline__ float lf_widen(unsigned short h) {
    float x;
    asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(x) : \"h\"(h));
    return x;
}
__device__ __forceinline__ unsigned short lf_narrow(float x) {
    unsigned short h;
    asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(x));
    return h;
}
__device__ __forceinline__ float lf_round(float x) { return lf_widen(lf_narrow(x)); }
__device__ __forceinline__ float lf_widen_bits(unsigned b) { return lf_widen((unsigned short)b); }
__device__ __forceinline__ unsigned lf_bits(float x) { return (unsigned)lf_narrow(x); }
"
        }
    }
}

/// `lf_rewiden<P>(word, high)`: one value of a packed 16-bit tile widened
/// again in phase P. ptxas sees through the empty `asm` that hides the
/// word and would otherwise reuse what an earlier phase widened, holding
/// two f32 registers per word across each reduction. So bf16 widens by
/// `prmt`, never the first load's shift and mask, with a zero selector
/// that differs from phase to phase (layernorm bf16 W=512 with one-pass
/// moments: 67 -> 62 registers; the long-row cluster kernels 80 -> 61).
fn rewiden_helper(dtype: DType) -> &'static str {
    match dtype {
        DType::Bf16 => {
            "template <unsigned P> __device__ __forceinline__ float lf_rewiden(unsigned w, bool high) {
    constexpr unsigned z = 0x44u + 0x11u * (P % 4u);
    unsigned b;
    if (high) asm(\"prmt.b32 %0, %1, 0, %2;\" : \"=r\"(b) : \"r\"(w), \"n\"(0x3200u | z));
    else asm(\"prmt.b32 %0, %1, 0, %2;\" : \"=r\"(b) : \"r\"(w), \"n\"(0x1000u | z));
    return __uint_as_float(b);
}
"
        }
        _ => {
            "template <unsigned P> __device__ __forceinline__ float lf_rewiden(unsigned w, bool high) { return lf_widen_bits(high ? w >> 16 : w & 0xffffu); }\n"
        }
    }
}

/// exp(x) = 2^(x log2 e): a multiply and the SFU's `ex2.approx` (relative
/// error about 2^-22) instead of `expf`'s ~10-instruction range reduction,
/// which made bf16 softmax and cross-entropy instruction-bound on the H200.
/// Results below 2^-126 flush to zero.
const MATH_HELPERS: &str = "__device__ __forceinline__ float lf_exp(float x) {
    float y;
    asm(\"ex2.approx.ftz.f32 %0, %1;\" : \"=f\"(y) : \"f\"(x * 1.4426950408889634f));
    return y;
}
";

/// The cold path of a norm's row ([`lanefold_ir::Instr::Rescaled`]), taken
/// where the fast statistic is unsound: every thread of the row reads the
/// whole row and computes the statistic (`lf_cold_stats`: compensated sums
/// in element order, every operation rounded on its own), then writes its
/// own elements' outputs (`lf_cold_out`; element `i` is worker
/// `(i / V) % W`'s): the CPU executor's `cold_row` bit for bit. Both are
/// non-inlined, specialised to the program's buffers and called after the
/// row's last phase with nothing of the kernel live across either call
/// (the call site derives the row and worker again), so they fit under the
/// hot kernel's registers and its count does not move.
fn cold_helpers(program: &Program, stat: RowStat, residual: bool, aligned_packs: bool) -> String {
    let max = lit(f32::MAX);
    let has_in = |b: &str| program.input(b).is_some();
    let has_out = |b: &str| program.output(b).is_some_and(|d| d.kind == BufferKind::Row);
    let mut row_params = vec!["const lf_store_t* x"];
    if residual {
        row_params.push("const lf_store_t* r");
    }
    let mut params = row_params.clone();
    if has_in("weight") {
        params.push("const lf_store_t* wt");
    }
    if has_in("bias") {
        params.push("const lf_store_t* b");
    }
    if has_out("h") {
        params.push("lf_store_t* h");
    }
    params.extend(["lf_store_t* y", "int w"]);
    // Aligned packs: worker w's elements start `s` (the row's shift) earlier.
    let (shift, skip) = if aligned_packs {
        params.push("int s");
        (" - s", "            if (i < 0) continue;\n")
    } else {
        ("", "")
    };
    params.push("float4 st");
    let h = |i: &str| {
        if residual {
            format!("lf_round(__fadd_rn(lf_widen(x[{i}]), lf_widen(r[{i}])))")
        } else {
            format!("lf_widen(x[{i}])")
        }
    };
    let hi = h("i");
    let mut store = String::new();
    if has_out("h") {
        store.push_str("            h[i] = lf_narrow(hv);\n");
    }
    store.push_str(match stat {
        RowStat::RmsRstd => "            float v = __fmul_rn(hv, st.x);\n",
        RowStat::LnRstd => {
            "            float v = __fmul_rn(__fsub_rn(__fsub_rn(__fmul_rn(hv, st.x), st.y), st.z), st.w);\n"
        }
    });
    if has_in("weight") {
        store.push_str("            v = __fmul_rn(v, lf_widen(wt[i]));\n");
    }
    if has_in("bias") {
        store.push_str("            v = __fadd_rn(v, lf_widen(b[i]));\n");
    }
    store.push_str("            y[i] = lf_narrow(v);\n");
    let stats = match stat {
        RowStat::RmsRstd => format!(
            "    const float s = {s};
    float acc = 0.0f, c = 0.0f, p = 0.0f;
    #pragma unroll 1
    for (int i = 0; i < LF_N; ++i) {{
        const float t = __fmul_rn({hi}, s);
        lf_kahan(acc, c, __fmul_rn(t, t));
        p = __fadd_rn(p, __fmul_rn(t, t));
    }}
    // An infinite sum's compensation is NaN: the plain sum is the answer.
    if (!(fabsf(p) <= {max})) acc = p;
    return make_float4(__fmul_rn(__fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(acc, (float)LF_N), {tiny}))), s), 0.0f, 0.0f, 0.0f);
",
            s = lit(lanefold_ir::RESCUE_SCALE),
            tiny = lit(f32::MIN_POSITIVE),
        ),
        RowStat::LnRstd => format!(
            "    float amax = 0.0f;
    bool bad = false;
    #pragma unroll 1
    for (int i = 0; i < LF_N; ++i) {{
        const float a = fabsf({hi});
        if (!(a <= {max})) bad = true;
        else amax = fmaxf(amax, a);
    }}
    // A power of two that brings the row to order 1 (exact).
    const int e = min(max((int)(__float_as_uint(amax) >> 23), 1), 253);
    const float s = __uint_as_float((unsigned)(254 - e) << 23);
    const float k = __fmul_rn({h0}, s);
    float acc = 0.0f, c = 0.0f;
    #pragma unroll 1
    for (int i = 0; i < LF_N; ++i) lf_kahan(acc, c, __fsub_rn(__fmul_rn({hi}, s), k));
    const float m1 = __fdiv_rn(acc, (float)LF_N);
    acc = 0.0f;
    c = 0.0f;
    #pragma unroll 1
    for (int i = 0; i < LF_N; ++i) {{
        const float d = __fsub_rn(__fsub_rn(__fmul_rn({hi}, s), k), m1);
        lf_kahan(acc, c, __fmul_rn(d, d));
    }}
    const float var = __fdiv_rn(acc, (float)LF_N);
    float rstd;
    if (s <= 1.0f) {{
        const float q = __fadd_rn(var, __fmul_rn({eps}, __fmul_rn(s, s)));
        rstd = q > 0.0f ? __fdiv_rn(1.0f, __fsqrt_rn(q)) : 0.0f;
    }} else {{
        const float u = __fdiv_rn(__fdiv_rn(var, s), s);
        rstd = __fdiv_rn(1.0f, __fmul_rn(s, __fsqrt_rn(__fadd_rn(u, {eps}))));
    }}
    if (bad) rstd = __int_as_float(0x7fffffff);
    return make_float4(s, k, m1, rstd);
",
            h0 = h("0"),
            eps = lit(program.norm_eps().unwrap_or(lanefold_ir::LAYERNORM_EPS)),
        ),
    };
    format!(
        "__device__ __forceinline__ void lf_kahan(float& sum, float& c, float v) {{
    const float y = __fsub_rn(v, c);
    const float t = __fadd_rn(sum, y);
    c = __fsub_rn(__fsub_rn(t, sum), y);
    sum = t;
}}
__device__ __noinline__ float4 lf_cold_stats({row_params}) {{
{stats}}}
__device__ __noinline__ void lf_cold_out({params}) {{
    #pragma unroll 1
    for (int i = w * LF_V{shift}; i < LF_N; i += (LF_W - 1) * LF_V) {{
        #pragma unroll 1
        for (int e = 0; e < LF_V && i < LF_N; ++e, ++i) {{
{skip}            const float hv = {hi};
{store}        }}
    }}
}}
__device__ __forceinline__ int lf_tid_again() {{
    int t;
    asm volatile(\"mov.u32 %0, %%tid.x;\" : \"=r\"(t));
    return t;
}}
__device__ __forceinline__ int lf_ctaid_again() {{
    int t;
    asm volatile(\"mov.u32 %0, %%ctaid.x;\" : \"=r\"(t));
    return t;
}}
",
        row_params = row_params.join(", "),
        params = params.join(", ")
    )
}

/// Three overloads (16-, 8- and 4-byte accesses) of one inline-PTX load
/// `name(p)` issuing `op`, e.g. `ld.global.cs`; with `policy`, the load takes
/// an L2 cache policy operand, `name(p, pol)`. Plain `asm`, not volatile,
/// so the compiler may still schedule the loads early; every caller's `op`
/// is `.nc` (kernel inputs are read-only), without which ptxas keeps each
/// load below the stores before it (a re-read phase issued one
/// x and one weight load per store, rmsnorm f32 4096x32768 275 -> 263 µs).
fn vector_load_helpers(name: &str, op: &str, policy: bool) -> String {
    load_helpers(name, op, policy, "asm", "")
}

/// `LayoutRequest::ordered_columns`: column loads that stay below the
/// stores before them. `asm volatile` with a memory clobber keeps NVVM
/// from moving them, and an `op` without `.nc` keeps ptxas from it.
fn ordered_column_helpers(plan: &Plan) -> String {
    let ordered = |name: &str, op: &str, policy: bool| {
        load_helpers(name, op, policy, "asm volatile", " : \"memory\"")
    };
    if keeps_columns(plan) {
        ordered(
            "lf_ld_ord_keep",
            "ld.global.L1::evict_last.L2::cache_hint",
            true,
        )
    } else {
        ordered("lf_ld_ord", "ld.global", false)
    }
}

fn load_helpers(name: &str, op: &str, policy: bool, asm: &str, clobber: &str) -> String {
    let mut out = String::new();
    for (ty, shape, outs) in [
        ("uint4", ".v4", &["v.x", "v.y", "v.z", "v.w"][..]),
        ("uint2", ".v2", &["v.x", "v.y"][..]),
        ("unsigned", "", &["v"][..]),
    ] {
        let regs: Vec<String> = (0..outs.len()).map(|i| format!("%{i}")).collect();
        let regs = if outs.len() > 1 {
            format!("{{{}}}", regs.join(", "))
        } else {
            regs.join("")
        };
        let addr = outs.len();
        let (param, operand, input) = if policy {
            (
                ", unsigned long long pol",
                format!(", %{}", addr + 1),
                ", \"l\"(pol)",
            )
        } else {
            ("", String::new(), "")
        };
        let constraints: Vec<String> = outs.iter().map(|o| format!("\"=r\"({o})")).collect();
        let _ = write!(
            out,
            "__device__ __forceinline__ {ty} {name}(const {ty}* p{param}) {{\n    {ty} v;\n    \
             {asm}(\"{op}{shape}.u32 {regs}, [%{addr}]{operand};\" : {} : \"l\"(p){input}{clobber});\n    \
             return v;\n}}\n",
            constraints.join(", ")
        );
    }
    out
}

/// Evict-first ("cache streaming") vector loads and stores for
/// `LayoutRequest::streaming_hints`: data touched once should not push
/// data that is reused (weights, re-read tiles) out of L2.
fn streaming_helpers(plan: &Plan) -> String {
    let op = format!("ld.global.cs{}", read_only(plan));
    vector_load_helpers("lf_ld_cs", &op, false) + STREAMING_STORES
}

/// `.nc` on hinted loads unless the plan keeps them ordered
/// ([`lanefold_plan::LayoutRequest::ordered_hinted_loads`]).
/// Never in place: `.nc` promises that nothing the kernel writes is read.
fn read_only(plan: &Plan) -> &'static str {
    if plan.ordered_hinted_loads || plan.in_place {
        ""
    } else {
        ".nc"
    }
}

const STREAMING_STORES: &str = "__device__ __forceinline__ void lf_st_cs(uint4* p, uint4 v) {
    asm volatile(\"st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};\" :: \"l\"(p), \"r\"(v.x), \"r\"(v.y), \"r\"(v.z), \"r\"(v.w) : \"memory\");
}
__device__ __forceinline__ void lf_st_cs(uint2* p, uint2 v) {
    asm volatile(\"st.global.cs.v2.u32 [%0], {%1, %2};\" :: \"l\"(p), \"r\"(v.x), \"r\"(v.y) : \"memory\");
}
__device__ __forceinline__ void lf_st_cs(unsigned* p, unsigned v) {
    asm volatile(\"st.global.cs.u32 [%0], %1;\" :: \"l\"(p), \"r\"(v) : \"memory\");
}
";

/// An aligned-packs row's shift ([`Plan::row_shift`]) from its element
/// offset `off`: the masked elements before its first aligned pack.
fn row_shift(off: &str) -> String {
    format!("(int)({off} & (LF_V - 1))")
}

/// Vector stores that stay vector stores. In an aligned-packs plan NVVM
/// split `q[k] = a` into scalar stores (a row's first pack stores the
/// same addresses element by element): softmax f32 W=512 on rows of 30522
/// had 64 `STG.E` and one `STG.E.128` and wrote at 1.6 TB/s, where rows of
/// 30524 (14 `STG.E.128`) ran at 4.0.
const VECTOR_STORES: &str = "__device__ __forceinline__ void lf_st(uint4* p, uint4 v) {
    asm volatile(\"st.global.v4.u32 [%0], {%1, %2, %3, %4};\" :: \"l\"(p), \"r\"(v.x), \"r\"(v.y), \"r\"(v.z), \"r\"(v.w) : \"memory\");
}
__device__ __forceinline__ void lf_st(uint2* p, uint2 v) {
    asm volatile(\"st.global.v2.u32 [%0], {%1, %2};\" :: \"l\"(p), \"r\"(v.x), \"r\"(v.y) : \"memory\");
}
__device__ __forceinline__ void lf_st(unsigned* p, unsigned v) {
    asm volatile(\"st.global.u32 [%0], %1;\" :: \"l\"(p), \"r\"(v) : \"memory\");
}
";

/// Column loads carry the evict-last policy: asked for directly
/// (`keep_columns`) or as part of re-read hints. Every cache policy the
/// kernel uses is created where this holds.
fn keeps_columns(plan: &Plan) -> bool {
    plan.reread_hints || plan.keep_columns
}

/// The cluster barrier before exit arrives relaxed: asked for, or needed
/// by nothing stronger since a pushed reduction reads no remote slots.
fn exits_relaxed(plan: &Plan) -> bool {
    plan.relaxed_cluster_exit || plan.pushed_cluster_reduce
}

/// `LayoutRequest::reread_hints`: L2 eviction priorities through cache
/// policies (sm_80+). A tile's first load asks L2 (and L1) to keep it for
/// the phase that reads it again; its last re-read lets it go first.
fn reread_helpers(plan: &Plan) -> String {
    let nc = read_only(plan);
    REREAD_POLICIES.to_string()
        + &vector_load_helpers(
            "lf_ld_keep",
            &format!("ld.global{nc}.L1::evict_last.L2::cache_hint"),
            true,
        )
        + &vector_load_helpers(
            "lf_ld_drop",
            &format!("ld.global{nc}.L1::evict_first.L2::cache_hint"),
            true,
        )
}

const REREAD_POLICIES: &str = "__device__ __forceinline__ unsigned long long lf_policy_keep() {
    unsigned long long p;
    asm(\"createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\" : \"=l\"(p));
    return p;
}
__device__ __forceinline__ unsigned long long lf_policy_drop() {
    unsigned long long p;
    asm(\"createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\" : \"=l\"(p));
    return p;
}
";

/// `LayoutRequest::l1_columns`: row tiles bypass L1 (`L1::no_allocate`),
/// so the columns every row reads again stay there; with a cache policy
/// where re-read hints ask for one.
fn l1_column_helpers(plan: &Plan) -> String {
    let nc = read_only(plan);
    let mut out = vector_load_helpers("lf_ld_na", &format!("ld.global{nc}.L1::no_allocate"), false);
    if plan.reread_hints {
        out += &vector_load_helpers(
            "lf_ld_na_hint",
            &format!("ld.global{nc}.L1::no_allocate.L2::cache_hint"),
            true,
        );
    }
    out
}

/// A shared-memory address for PTX operands (staged columns, pushed
/// reductions).
const SHARED_ADDR_HELPER: &str =
    "__device__ __forceinline__ unsigned lf_shared_addr(const void* p) {
    unsigned long long a;
    asm(\"cvta.to.shared.u64 %0, %1;\" : \"=l\"(a) : \"l\"(p));
    return (unsigned)a;
}
";

/// Asynchronous global-to-shared copies of one access (sm_80+) for staged
/// columns: 16 bytes may bypass L1 (`.cg`), smaller copies must use `.ca`.
const STAGE_HELPERS: &str = "__device__ __forceinline__ void lf_cp_async_16(uint4* dst, const uint4* src) {
    asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16;\" :: \"r\"(lf_shared_addr(dst)), \"l\"(src) : \"memory\");
}
__device__ __forceinline__ void lf_cp_async_8(uint2* dst, const uint2* src) {
    asm volatile(\"cp.async.ca.shared.global [%0], [%1], 8;\" :: \"r\"(lf_shared_addr(dst)), \"l\"(src) : \"memory\");
}
__device__ __forceinline__ void lf_cp_async_4(unsigned* dst, const unsigned* src) {
    asm volatile(\"cp.async.ca.shared.global [%0], [%1], 4;\" :: \"r\"(lf_shared_addr(dst)), \"l\"(src) : \"memory\");
}
";

/// The barrier before exit of `relaxed_cluster_exit` plans (emitted only
/// there, so other kernels keep their recorded sources).
const CLUSTER_EXIT_HELPER: &str =
    "// Before exit: only that every group has done its remote reads (their
// values are in registers before it arrives), so no release is needed and
// the row's stores need not be acknowledged before the group may leave.
__device__ __forceinline__ void lf_cluster_exit() {
    asm volatile(\"barrier.cluster.arrive.relaxed.aligned;\" ::: \"memory\");
    asm volatile(\"barrier.cluster.wait.aligned;\" ::: \"memory\");
}
";

/// The pushed cluster reduction (`push_cluster_reduce`): `st.async` of a
/// partial into another group's slot, completing its `mbarrier`, and the
/// wait for a local `mbarrier`'s first phase (acquire at cluster scope:
/// the pushes come from other groups of the cluster).
const PUSH_HELPERS: &str = "__device__ __forceinline__ void lf_push(float* slot, unsigned long long* bar, unsigned rank, float v) {
    unsigned remote_slot, remote_bar;
    asm volatile(\"mapa.shared::cluster.u32 %0, %1, %2;\" : \"=r\"(remote_slot) : \"r\"(lf_shared_addr(slot)), \"r\"(rank));
    asm volatile(\"mapa.shared::cluster.u32 %0, %1, %2;\" : \"=r\"(remote_bar) : \"r\"(lf_shared_addr(bar)), \"r\"(rank));
    asm volatile(\"st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];\" :: \"r\"(remote_slot), \"f\"(v), \"r\"(remote_bar) : \"memory\");
}
__device__ __forceinline__ void lf_push_wait(unsigned long long* bar) {
    asm volatile(\"{\\n.reg .pred lf_done;\\nLF_WAIT:\\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 lf_done, [%0], 0;\\n@!lf_done bra LF_WAIT;\\n}\" :: \"r\"(lf_shared_addr(bar)) : \"memory\");
}
";

const PREFETCH_HELPERS: &str = "// Row prefetch (sm_90): bulk copies of the group's share of the next row into shared memory.
__device__ __forceinline__ void lf_prefetch_init(const unsigned long long* bar) {
    asm volatile(\"mbarrier.init.shared::cta.b64 [%0], 1;\" :: \"r\"(lf_shared_addr(bar)) : \"memory\");
    asm volatile(\"fence.proxy.async.shared::cta;\" ::: \"memory\");
}
__device__ __forceinline__ void lf_prefetch(lf_store_t* buf, const lf_store_t* src, const unsigned long long* bar) {
    // The group's reads of the buffer (generic proxy) come before the copy's writes (async proxy).
    asm volatile(\"fence.proxy.async.shared::cta;\" ::: \"memory\");
    asm volatile(\"mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\" :: \"r\"(lf_shared_addr(bar)), \"r\"(LF_ROW_BYTES) : \"memory\");
    // One copy per chunk: a cluster group's share of a row is strided.
#pragma unroll
    for (int c = 0; c < LF_COPIES; ++c)
        asm volatile(\"cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\"
                     :: \"r\"(lf_shared_addr(buf + c * LF_COPY_ELEMS)), \"l\"(src + (size_t)c * LF_COPY_STRIDE), \"r\"(LF_ROW_BYTES / LF_COPIES), \"r\"(lf_shared_addr(bar)) : \"memory\");
}
__device__ __forceinline__ void lf_prefetch_wait(const unsigned long long* bar, unsigned parity) {
    asm volatile(\"{\\n.reg .pred lf_done;\\nLF_ROW_WAIT:\\nmbarrier.try_wait.parity.shared::cta.b64 lf_done, [%0], %1;\\n@!lf_done bra LF_ROW_WAIT;\\n}\" :: \"r\"(lf_shared_addr(bar)), \"r\"(parity) : \"memory\");
}
";

/// A hint (no registers, no completion to wait for), so no memory clobber.
const L2_PREFETCH_HELPER: &str =
    "__device__ __forceinline__ void lf_prefetch_l2(const void* p, unsigned bytes) {
    asm volatile(\"cp.async.bulk.prefetch.L2.global [%0], %1;\" :: \"l\"(p), \"r\"(bytes));
}
";

const CLUSTER_HELPERS: &str = "// Thread-block cluster helpers (sm_90): barrier and distributed shared memory.
__device__ __forceinline__ void lf_cluster_sync() {
    asm volatile(\"barrier.cluster.arrive.release.aligned;\" ::: \"memory\");
    asm volatile(\"barrier.cluster.wait.acquire.aligned;\" ::: \"memory\");
}
__device__ __forceinline__ float lf_cluster_load(const float* local, unsigned rank) {
    unsigned long long shared_addr;
    asm(\"cvta.to.shared.u64 %0, %1;\" : \"=l\"(shared_addr) : \"l\"(local));
    unsigned remote;
    asm volatile(\"mapa.shared::cluster.u32 %0, %1, %2;\" : \"=r\"(remote) : \"r\"((unsigned)shared_addr), \"r\"(rank));
    float v;
    asm volatile(\"ld.shared::cluster.f32 %0, [%1];\" : \"=f\"(v) : \"r\"(remote) : \"memory\");
    return v;
}
";

/// Vector access of V elements: 32-bit words per pack and words per access.
#[derive(Clone, Copy)]
struct Vector {
    words: usize,
    per_access: usize,
}

impl Vector {
    fn access_type(&self) -> &'static str {
        match self.per_access {
            4 => "uint4",
            2 => "uint2",
            _ => "unsigned",
        }
    }
    fn fields(&self) -> &'static [&'static str] {
        match self.per_access {
            4 => &["x", "y", "z", "w"],
            2 => &["x", "y"],
            _ => &[""],
        }
    }
}

/// Float offsets in `lf_smem` of a pushed cluster reduction: reduction k's
/// slot for the group of rank r at `slots + k * cluster + r`, its
/// `mbarrier` at `barriers + 2 * k`. A persistent cluster has two sets,
/// alternating row by row (`lf_set`): set s's slots `reductions * cluster
/// * G` floats on, its `mbarrier`s `2 * reductions` floats on.
#[derive(Clone, Copy)]
struct Push {
    slots: usize,
    barriers: usize,
    sets: usize,
}

/// The persistent cluster's pushed reduction: the wait for the phase of
/// this row's set (`lf_parity`), and the arm of a local `mbarrier` for
/// the row after next, which pushes into the same set.
const PERSISTENT_PUSH_HELPERS: &str = "__device__ __forceinline__ void lf_push_wait_parity(unsigned long long* bar, unsigned parity) {
    asm volatile(\"{\\n.reg .pred lf_done;\\nLF_WAIT:\\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 lf_done, [%0], %1;\\n@!lf_done bra LF_WAIT;\\n}\" :: \"r\"(lf_shared_addr(bar)), \"r\"(parity) : \"memory\");
}
__device__ __forceinline__ void lf_push_arm(unsigned long long* bar, unsigned bytes) {
    asm volatile(\"mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\" :: \"r\"(lf_shared_addr(bar)), \"r\"(bytes) : \"memory\");
}
";

#[derive(Clone)]
struct Gather {
    buffer: String,
    index: Value,
}

/// Find `Reduce(Sum, MaskIndex(Load <row buffer>, index))`; also the
/// MaskIndex tiles used by nothing else.
fn find_gathers(program: &Program) -> (Vec<Option<Gather>>, BTreeSet<usize>) {
    let body = &program.body;
    let mut gathers = vec![None; body.len()];
    for (at, instr) in body.iter().enumerate() {
        let Instr::Reduce {
            op: ReduceOp::Sum,
            arg,
        } = instr
        else {
            continue;
        };
        let Instr::MaskIndex { tile, index } = &body[arg.index()] else {
            continue;
        };
        let Instr::Load { buffer } = &body[tile.index()] else {
            continue;
        };
        let row = program
            .input(buffer)
            .is_some_and(|d| d.kind == BufferKind::Row);
        if row {
            gathers[at] = Some(Gather {
                buffer: buffer.clone(),
                index: *index,
            });
        }
    }
    let mut skipped = BTreeSet::new();
    for (at, instr) in body.iter().enumerate() {
        if !matches!(instr, Instr::MaskIndex { .. }) {
            continue;
        }
        let users: Vec<usize> = body
            .iter()
            .enumerate()
            .filter(|(_, u)| u.operands().contains(&Value(at as u32)))
            .map(|(u, _)| u)
            .collect();
        if !users.is_empty() && users.iter().all(|&u| gathers[u].is_some()) {
            skipped.insert(at);
        }
    }
    (gathers, skipped)
}

struct Ctx<'a> {
    plan: &'a Plan,
    program: &'a Program,
    kinds: &'a [Kind],
    phase: &'a [usize],
    demanded: &'a [BTreeSet<usize>],
    dtype: DType,
    v: usize,
    g: usize,
    lanes: usize,
    warps: usize,
    cluster: usize,
    full: usize,
    partial: usize,
    /// Chunks of an aligned-packs plan ([`Plan::aligned_packs`]): chunk 0
    /// and those from `full` on are guarded; 0 for other plans.
    aligned_chunks: usize,
    vector: Option<Vector>,
    registers: bool,
    /// Where a pushed cluster reduction keeps its slots and barriers.
    push: Option<Push>,
    /// Has this group passed the wait of the barrier that publishes the
    /// pushed reduction's barriers? (Once, before the first push.)
    cluster_waited: bool,
    resident: Vec<Value>,
    /// Index of each reduction in program order, by value.
    red_index: Vec<Option<usize>>,
    /// Sum reductions of a masked row load (`Reduce(Sum, MaskIndex(Load x,
    /// i))`), by value: `x[i]` read directly instead of a compare, select
    /// and add per element. Exact: the masked sum adds zeros to one value.
    gathers: Vec<Option<Gather>>,
    /// MaskIndex tiles whose only users are gathered reductions.
    skipped: BTreeSet<usize>,
    reductions: usize,
    /// The row input a persistent group prefetches into shared memory
    /// (`lf_rowbuf`), read from there in its one loading phase.
    prefetched: Option<String>,
    /// That loading phase: once its loads are in the slots, the next row's
    /// copy starts, before the phase's reduction.
    prefetch_phase: Option<usize>,
    /// The loads of the partial chunk's whole pack that the current phase
    /// issued before its complete chunks ([`Ctx::preloads_partial`]).
    preloaded: Vec<Value>,
    /// Scalars the current phase reads through an opaque copy
    /// ([`Ctx::hide_rebroadcast_scalars`]).
    hidden_scalars: BTreeSet<usize>,
    /// The calls of an [`Instr::Rescaled`]'s cold path, made after the
    /// row's last phase.
    cold_call: Option<Vec<String>>,
    /// The worker and row of a non-persistent thread as expressions of
    /// `lf_tid_again()` and `lf_ctaid_again()`.
    again: Option<(String, String)>,
    out: String,
    indent: usize,
}

impl Ctx<'_> {
    fn line(&mut self, s: &str) {
        for _ in 0..self.indent {
            self.out.push_str("    ");
        }
        self.out.push_str(s);
        self.out.push('\n');
    }

    fn open(&mut self, s: &str) {
        self.line(s);
        self.indent += 1;
    }

    fn close(&mut self) {
        self.indent -= 1;
        self.line("}");
    }

    fn name(&self, v: Value) -> String {
        match self.kinds[v.index()] {
            Kind::Tile => format!("t{}", v.0),
            Kind::Scalar => format!("s{}", v.0),
            Kind::Index => format!("x{}", v.0),
            Kind::Effect => format!("e{}", v.0),
        }
    }

    fn buffer_kind(&self, name: &str) -> BufferKind {
        self.program
            .input(name)
            .or_else(|| self.program.output(name))
            .map(|d| d.kind)
            .expect("verified program declares every buffer it uses")
    }

    fn is_resident(&self, v: Value) -> bool {
        self.registers && self.resident.contains(&v)
    }

    /// Is `v` a resident tile kept as its loaded 16-bit words?
    fn packs(&self, v: Value) -> bool {
        self.plan.packed_resident && self.is_resident(v)
    }

    /// The resident row load whose last chunks are held in shared memory
    /// ([`Plan::shared_chunks`]), with its buffer.
    fn shared_tile(&self) -> Option<(Value, String)> {
        self.plan.shared_chunks?;
        let v = self.plan.analysis.resident_row_load(self.program)?;
        match &self.program.body[v.index()] {
            Instr::Load { buffer } if self.is_resident(v) => Some((v, buffer.clone())),
            _ => None,
        }
    }

    fn is_shared_tile(&self, v: Value) -> bool {
        self.shared_tile().is_some_and(|(s, _)| s == v)
    }

    /// `wd[]`, the words of access `k` of a vector pack, from `a`.
    fn emit_access_words(&mut self, vec: Vector, k: usize) {
        for (f, field) in vec.fields().iter().enumerate() {
            let src = if field.is_empty() {
                "a".to_string()
            } else {
                format!("a.{field}")
            };
            self.line(&format!("wd[{}] = {src};", k * vec.per_access + f));
        }
    }

    /// A column's pack `arr` at the row's element `i0` in an aligned-packs
    /// plan. A column does not follow the row's shift, but the shift
    /// (`r * N mod V`) is a multiple of `gcd(N, V)`, and so is every pack's
    /// start: the pack is read in accesses of that many elements where
    /// they make a word or more, element by element otherwise.
    fn emit_shifted_column(&mut self, arr: &str, ptr: &str) {
        let n = self.plan.shape().n;
        let elems = (1..=self.v)
            .rev()
            .find(|&g| n.is_multiple_of(g) && self.v.is_multiple_of(g))
            .unwrap_or(1);
        let bytes = elems * self.dtype.size_bytes();
        if elems < 2 || bytes < 4 {
            self.line("#pragma unroll");
            self.line(&format!(
                "for (int e = 0; e < LF_V; ++e) {arr}[e] = lf_widen({ptr}[i0 + e]); // column, element by element"
            ));
            return;
        }
        let vec = Vector {
            words: self.v * self.dtype.size_bytes() / 4,
            per_access: bytes / 4,
        };
        let ty = vec.access_type();
        self.open("{");
        self.line(&format!("unsigned wd[{}];", vec.words));
        self.line(&format!(
            "const {ty}* q = reinterpret_cast<const {ty}*>({ptr} + i0); // column, {elems} elements an access"
        ));
        for k in 0..vec.words / vec.per_access {
            self.open("{");
            self.line(&format!("const {ty} a = q[{k}];"));
            self.emit_access_words(vec, k);
            self.close();
        }
        self.emit_widened_words(arr);
        self.close();
    }

    /// `arr[e]`, the pack's elements widened from its storage words `wd[]`.
    fn emit_widened_words(&mut self, arr: &str) {
        for e in 0..self.v {
            let word = if self.dtype == DType::F32 {
                format!("wd[{e}]")
            } else if e % 2 == 0 {
                format!("(wd[{}] & 0xffffu)", e / 2)
            } else {
                format!("(wd[{}] >> 16)", e / 2)
            };
            self.line(&format!("{arr}[{e}] = lf_widen_bits({word});"));
        }
    }

    /// `cp.async` of this worker's packs of chunks `first..LF_FULL` of
    /// `src` into `dst[chunk - first][access][thread]` (`unroll` 0: fully).
    fn emit_chunk_copies(&mut self, dst: &str, src: &str, first: &str, unroll: u32, vec: Vector) {
        let ty = vec.access_type();
        let bytes = 4 * vec.per_access;
        let accesses = vec.words / vec.per_access;
        let chunk = if first == "0" {
            "c".to_string()
        } else {
            format!("(c - {first})")
        };
        match unroll {
            0 => self.line("#pragma unroll"),
            u => self.line(&format!("#pragma unroll {u}")),
        }
        self.open(&format!("for (int c = {first}; c < LF_FULL; ++c) {{"));
        self.line(&format!(
            "const {ty}* q = reinterpret_cast<const {ty}*>({src} + (c * LF_W + w) * LF_V);"
        ));
        for k in 0..accesses {
            self.line(&format!(
                "lf_cp_async_{bytes}(&{dst}[({chunk} * {accesses} + {k}) * LF_T + tid], q + {k});"
            ));
        }
        self.close();
    }

    /// Copy this worker's packs of the row's last chunks into its slots of
    /// `lf_sh` (`[chunk][access][thread]`) with `cp.async`: the copies hold
    /// no registers in flight. Each worker reads back only what it copied,
    /// after its own `cp.async.wait_all`, so no barrier is needed.
    fn emit_shared_chunk_copies(&mut self, offset_bytes: u32, vec: Vector) {
        let Some((_, buffer)) = self.shared_tile() else {
            return;
        };
        let ty = vec.access_type();
        self.line(&format!(
            "{ty}* lf_sh = reinterpret_cast<{ty}*>(reinterpret_cast<unsigned char*>(lf_smem) + {offset_bytes}); // the row's chunks LF_SH0.. of this group"
        ));
        self.open("if (row_ok) {");
        let src = format!("p_{} + row_off", ident(&buffer));
        self.emit_chunk_copies("lf_sh", &src, "LF_SH0", 0, vec);
        self.close();
        self.line("asm volatile(\"cp.async.commit_group;\" ::: \"memory\");");
    }

    fn needed(&self, v: usize, p: usize) -> bool {
        self.kinds[v] == Kind::Tile && self.demanded[v].contains(&p) && !self.skipped.contains(&v)
    }

    /// [`Plan::recompute_derived`]: the scalars phase `p`'s tiles
    /// broadcast that an earlier phase's tiles broadcast too, each read
    /// here through a copy the compiler cannot see through (`h<value>`).
    /// Otherwise it may keep what the earlier phase derived from a
    /// resident tile (layernorm's centred row, `x - mean`, in both the
    /// variance and the output) as a second tile beside the first: 177
    /// registers instead of 128 for layernorm f32 at W=256 V=4 on rows of
    /// 22408 (NVRTC 13.0), one group a multiprocessor where legality
    /// counts two.
    fn hide_rebroadcast_scalars(&mut self, p: usize) {
        let broadcast_in = |q: usize| -> BTreeSet<usize> {
            self.program
                .body
                .iter()
                .enumerate()
                .filter(|&(at, _)| self.needed(at, q))
                .filter_map(|(_, instr)| match instr {
                    Instr::Broadcast(s) => Some(s.index()),
                    _ => None,
                })
                .collect()
        };
        // Recomputing costs an add or a multiply a pack; where the phase's
        // tiles take a special function (softmax's exp), keeping is cheaper.
        let arithmetic = self.program.body.iter().enumerate().all(|(at, instr)| {
            !self.needed(at, p)
                || !matches!(
                    instr,
                    Instr::Unary {
                        op: UnaryOp::Exp
                            | UnaryOp::Log
                            | UnaryOp::Sqrt
                            | UnaryOp::Rsqrt
                            | UnaryOp::Recip,
                        ..
                    } | Instr::Binary {
                        op: BinaryOp::Div,
                        ..
                    }
                )
        });
        if !arithmetic {
            return;
        }
        let earlier: BTreeSet<usize> = (0..p).flat_map(broadcast_in).collect();
        self.hidden_scalars = broadcast_in(p).intersection(&earlier).copied().collect();
        // Through its bits, so the host runtime's compiler reads it too.
        for &s in &self.hidden_scalars.clone() {
            self.line(&format!(
                "unsigned h{s}_bits = __float_as_uint(s{s}); asm(\"\" : \"+r\"(h{s}_bits)); // recomputed from the tile, not kept"
            ));
            self.line(&format!("const float h{s} = __uint_as_float(h{s}_bits);"));
        }
    }

    /// Does phase `p` read, reduce or store any tile?
    fn has_tile_work(&self, p: usize) -> bool {
        self.program
            .body
            .iter()
            .enumerate()
            .any(|(at, instr)| match instr {
                Instr::Reduce { arg, .. } => {
                    self.phase[arg.index()] == p && self.gathers[at].is_none()
                }
                Instr::ReduceSumExp { arg, .. } => self.phase[arg.index()] == p,
                Instr::Store { value, .. } => {
                    self.kinds[value.index()] == Kind::Tile && self.phase[value.index()] == p
                }
                _ => self.needed(at, p),
            })
    }

    fn reductions_in(&self, p: usize) -> Vec<(usize, Value, ReduceOp, Value)> {
        self.program
            .body
            .iter()
            .enumerate()
            .filter_map(|(at, instr)| match instr {
                Instr::Reduce { op, arg }
                    if self.phase[arg.index()] == p && self.gathers[at].is_none() =>
                {
                    Some((
                        self.red_index[at].expect("every reduction is numbered"),
                        Value(at as u32),
                        *op,
                        *arg,
                    ))
                }
                _ => None,
            })
            .collect()
    }

    /// The online normalizers accumulated in phase `p`: (k of the sum,
    /// k of its paired maximum, the tile, the sum's value).
    fn sum_exps_in(&self, p: usize) -> Vec<(usize, usize, Value, Value)> {
        self.program
            .body
            .iter()
            .enumerate()
            .filter_map(|(at, instr)| match instr {
                Instr::ReduceSumExp { arg, max } if self.phase[arg.index()] == p => Some((
                    self.red_index[at].expect("every reduction is numbered"),
                    self.red_index[max.index()].expect("every reduction is numbered"),
                    *arg,
                    Value(at as u32),
                )),
                _ => None,
            })
            .collect()
    }

    /// Plain reductions of phase `p` whose accumulator an online normalizer
    /// updates instead (its maximum).
    fn plain_reductions_in(&self, p: usize) -> Vec<(usize, Value, ReduceOp, Value)> {
        let paired: BTreeSet<usize> = self.sum_exps_in(p).iter().map(|&(_, m, ..)| m).collect();
        self.reductions_in(p)
            .into_iter()
            .filter(|(k, ..)| !paired.contains(k))
            .collect()
    }

    /// Xor butterflies of the (max, sum) pair `m`, `s` over `width` lanes
    /// of `mask`: every lane ends with the combined pair.
    fn emit_pair_shuffles(&mut self, m: &str, s: &str, mask: &str, width: usize) {
        let mut off = width / 2;
        while off >= 1 {
            self.open("{");
            self.line(&format!(
                "const float lf_om = __shfl_xor_sync({mask}, {m}, {off});"
            ));
            self.line(&format!(
                "const float lf_os = __shfl_xor_sync({mask}, {s}, {off});"
            ));
            self.pair_step(m, s, "lf_om", "lf_os");
            self.close();
            off /= 2;
        }
    }

    /// One butterfly step over (max, sum) pairs: the partner's pair is
    /// `om`, `os`; an empty pair (sum 0) adds 0 even with a -inf maximum.
    fn pair_step(&mut self, m: &str, s: &str, om: &str, os: &str) {
        self.line(&format!("const float lf_nm = fmaxf({m}, {om});"));
        self.line(&format!(
            "{s} = ({s} == 0.0f ? 0.0f : {s} * lf_exp({m} - lf_nm)) + ({os} == 0.0f ? 0.0f : {os} * lf_exp({om} - lf_nm));"
        ));
        self.line(&format!("{m} = lf_nm;"));
    }

    /// The phase that stores an in-place plan's aliased output.
    fn in_place_store_phase(&self) -> Option<usize> {
        let (_, output) = self.plan.in_place_pair()?;
        self.program.body.iter().find_map(|i| match i {
            Instr::Store { buffer, value } if buffer == output => Some(self.phase[value.index()]),
            _ => None,
        })
    }

    /// The gathered reductions whose masked tile belongs to phase `p`.
    fn emit_gathers(&mut self, p: usize) {
        for at in 0..self.program.body.len() {
            let Some(g) = self.gathers[at].clone() else {
                continue;
            };
            let Instr::Reduce { arg, .. } = &self.program.body[at] else {
                continue;
            };
            if self.phase[arg.index()] != p {
                continue;
            }
            let (r, i) = (self.name(Value(at as u32)), self.name(g.index));
            let s = format!(
                "const float {r} = ({i} >= 0 && {i} < LF_N) ? lf_widen(p_{}[row_off + {i}]) : 0.0f; // gathered masked sum",
                ident(&g.buffer)
            );
            self.line(&s);
        }
    }

    fn scalar_expr(&self, instr: &Instr) -> Option<String> {
        let n = |v: &Value| self.name(*v);
        Some(match instr {
            Instr::Const(c) => lit(*c),
            Instr::RowLen => "(float)LF_N".to_string(),
            Instr::RowFirst { buffer } => format!("lf_widen(p_{}[row_off])", ident(buffer)),
            // Only a per-row scalar input loads as a scalar; an f32 one
            // as it is.
            Instr::Load { buffer } if self.buffer_kind(buffer) == BufferKind::RowScalarF32 => {
                format!("p_{}[row_c]", ident(buffer))
            }
            Instr::Load { buffer } => format!("lf_widen(p_{}[row_c])", ident(buffer)),
            Instr::Unary { op, arg } => unary(*op, &n(arg)),
            Instr::Binary { op, lhs, rhs } => binary(*op, &n(lhs), &n(rhs)),
            Instr::RoundToStorage(v) => format!("lf_round({})", n(v)),
            Instr::Rescaled { fast, .. } => n(fast),
            Instr::SelectIndexEq {
                index,
                sentinel,
                if_eq,
                otherwise,
            } => format!(
                "({} == {}LL) ? {} : {}",
                n(index),
                sentinel,
                n(if_eq),
                n(otherwise)
            ),
            _ => return None,
        })
    }

    /// Per-row scalars and indices of phase `p` (reductions excepted: the
    /// tree defines them), then the scalar stores of phase `p`.
    fn emit_scalars(&mut self, p: usize) {
        for at in 0..self.program.body.len() {
            if self.phase[at] != p {
                continue;
            }
            let instr = &self.program.body[at];
            let v = Value(at as u32);
            match (self.kinds[at], instr) {
                (Kind::Index, Instr::Load { buffer }) => {
                    let s = format!(
                        "const long long {} = p_{}[row_c];",
                        self.name(v),
                        ident(buffer)
                    );
                    self.line(&s);
                }
                (Kind::Scalar, Instr::Reduce { .. } | Instr::ReduceSumExp { .. }) => {}
                (Kind::Scalar, _) => {
                    let e = self
                        .scalar_expr(instr)
                        .expect("every scalar instruction has an expression");
                    let s = format!("const float {} = {e};", self.name(v));
                    self.line(&s);
                    if let Instr::Rescaled { .. } = instr {
                        self.open_cold_branch(instr);
                    }
                }
                _ => {}
            }
        }
        // With G>1 rows per cluster, a row's first worker is not thread 0
        // of its group; `w` is the worker's index in its row everywhere.
        let worker0 = if self.cluster > 1 && self.plan.layout.rows_per_group == 1 {
            "tid == 0 && rank == 0"
        } else {
            "w == 0"
        };
        for instr in &self.program.body {
            if let Instr::Store { buffer, value } = instr {
                if self.kinds[value.index()] == Kind::Scalar && self.phase[value.index()] == p {
                    let narrow = if self.buffer_kind(buffer) == BufferKind::RowScalarF32 {
                        ""
                    } else {
                        "lf_narrow"
                    };
                    let s = format!(
                        "if (row_ok && {worker0}) p_{}[row] = {narrow}({});",
                        ident(buffer),
                        self.name(*value)
                    );
                    self.line(&s);
                }
            }
        }
    }

    /// The cold branch of an [`Instr::Rescaled`]: where the fast statistic
    /// is unsound, the non-inlined `lf_cold_row` writes this worker's
    /// outputs of the row; else the rest of the row runs (the block is
    /// closed after the last phase). Nothing of the fast path is live
    /// across the call.
    fn open_cold_branch(&mut self, instr: &Instr) {
        let Instr::Rescaled {
            stat,
            check,
            mean,
            x,
            residual,
            ..
        } = instr
        else {
            return;
        };
        let check = self.name(*check);
        let sound = match (stat, mean) {
            (RowStat::LnRstd, Some(m)) => {
                let m = self.name(*m);
                format!(
                    "fabsf({check}) <= {} && __fmul_rn({check}, {}) >= __fmul_rn({m}, {m})",
                    lit(f32::MAX),
                    lit((1u64 << lanefold_ir::LN_CANCEL_BITS) as f32)
                )
            }
            _ => format!("fabsf({check}) <= {}", lit(f32::MAX)),
        };
        // The statistics first; then the row and worker derived again, so
        // nothing is live across the first call.
        let mut first = vec![format!("p_{} + row_off", ident(x))];
        if let Some(r) = residual {
            first.push(format!("p_{} + row_off", ident(r)));
        }
        let (w, off) = match &self.again {
            Some((w, row)) => (w.clone(), format!("(size_t)({row}) * LF_N")),
            None => ("w".to_string(), "row_off".to_string()),
        };
        let mut args = vec![format!("p_{} + lf_off", ident(x))];
        if let Some(r) = residual {
            args.push(format!("p_{} + lf_off", ident(r)));
        }
        for column in ["weight", "bias"] {
            if self.program.input(column).is_some() {
                args.push(format!("p_{column}"));
            }
        }
        for out in ["h", "y"] {
            if self
                .program
                .output(out)
                .is_some_and(|d| d.kind == BufferKind::Row)
            {
                args.push(format!("p_{out} + lf_off"));
            }
        }
        args.push("lf_w".to_string());
        if self.aligned_chunks > 0 {
            args.push(row_shift("lf_off"));
        }
        args.push("lf_st".to_string());
        self.line(&format!("const bool lf_cold = !({sound});"));
        self.cold_call = Some(vec![
            "if (lf_cold && row_ok) { // the row again, in scaled form".to_string(),
            format!(
                "    const float4 lf_st = lf_cold_stats({});",
                first.join(", ")
            ),
            format!("    const int lf_w = {w};"),
            format!("    const size_t lf_off = {off};"),
            format!("    lf_cold_out({});", args.join(", ")),
            "}".to_string(),
        ]);
    }

    /// The prefetched row's buffer and `mbarrier`, and the copy of the
    /// group's first row (`first`).
    fn emit_prefetch_setup(&mut self, prefetch: RowPrefetch, input: &str, first: &str) {
        self.line(&format!(
            "lf_store_t* lf_rowbuf = reinterpret_cast<lf_store_t*>(reinterpret_cast<unsigned char*>(lf_smem) + {});",
            prefetch.buffer_offset
        ));
        self.line(&format!(
            "const unsigned long long* lf_rowbar = reinterpret_cast<const unsigned long long*>(reinterpret_cast<unsigned char*>(lf_smem) + {});",
            prefetch.barrier_offset()
        ));
        self.line("if (tid == 0) lf_prefetch_init(lf_rowbar);");
        self.line("__syncthreads();");
        let (_, share) = self.prefetch_source();
        self.line(&format!(
            "if (tid == 0 && {first} < rows) lf_prefetch(lf_rowbuf, p_{} + (size_t)({first}) * LF_N{share}, lf_rowbar);",
            ident(input)
        ));
    }

    /// The row a persistent group prefetches after `row`, and the offset of
    /// its share within a row (a cluster group's first chunk).
    fn prefetch_source(&self) -> (&'static str, String) {
        if self.cluster > 1 {
            (
                "row + lf_clusters",
                format!(
                    " + rank * {}",
                    self.plan.threads_per_group as usize * self.v
                ),
            )
        } else {
            ("row + (int)gridDim.x", String::new())
        }
    }

    /// One pack of V elements (or the first `count` of a guarded partial
    /// pack) at chunk `chunk` (a loop variable or a constant).
    fn emit_pack(&mut self, p: usize, chunk: &str, guarded: Option<usize>, batched: bool) {
        let body = &self.program.body;
        let v = self.v;
        let count = guarded.unwrap_or(v);
        if self.aligned_chunks > 0 {
            self.line(&format!(
                "const int i0 = ({chunk} * LF_W + w) * LF_V - lf_s; // the row's element"
            ));
        } else {
            self.line(&format!("const int i0 = ({chunk} * LF_W + w) * LF_V;"));
        }
        let vector = if guarded.is_none() { self.vector } else { None };
        // Shared chunks are complete ones: a row's partial chunk (guarded,
        // or of whole packs at `LF_FULL`) stays in registers.
        let shared = self
            .shared_tile()
            .filter(|_| guarded.is_none() && chunk != "LF_FULL");
        let in_shared = |v: Value| shared.as_ref().is_some_and(|(s, _)| *s == v);
        if let Some((val, _)) = &shared {
            // Static once the chunk loop is unrolled.
            self.line(&format!(
                "const bool lf_shc = ({chunk}) >= LF_SH0; // held in shared memory"
            ));
            self.line("(void)lf_shc;");
            if self.demanded[val.index()].first() == Some(&p) {
                self.line(&format!(
                    "if (({chunk}) == LF_SH0) asm volatile(\"cp.async.wait_all;\" ::: \"memory\"); // this worker's shared chunks"
                ));
            }
        }

        let global_loads = self.global_loads(p);
        let early = self.early_columns();
        for (val, buffer) in &global_loads {
            let base = self.row_base(buffer);
            let ptr = format!("p_{}", ident(buffer));
            let arr = format!("l{}", val.0);
            self.line(&format!("float {arr}[LF_V];"));
            if chunk == "LF_FULL"
                && self.early_partial_columns()
                && early.is_some_and(|(_, out)| out == p)
                && self.buffer_kind(buffer) == BufferKind::Column
            {
                self.line("#pragma unroll");
                self.line(&format!(
                    "for (int e = 0; e < LF_V; ++e) {arr}[e] = lf_ep{}[e]; // loaded early",
                    val.0
                ));
                continue;
            }
            if vector.is_some()
                && self.aligned_chunks > 0
                && self.buffer_kind(buffer) == BufferKind::Column
            {
                self.emit_shifted_column(&arr, &ptr);
                continue;
            }
            match vector {
                Some(vec) => {
                    let ty = vec.access_type();
                    self.open("{");
                    self.line(&format!("unsigned wd[{}];", vec.words));
                    // Staged columns are read from shared memory, not `q`;
                    // a preloaded pack from its registers.
                    let staged = self.is_staged(buffer);
                    let preloaded = chunk == "LF_FULL" && self.preloaded.contains(val);
                    let prefetched = self.prefetched.as_deref() == Some(buffer.as_str());
                    if prefetched {
                        // A cluster group's buffer holds its share, chunk by chunk.
                        let at = if self.cluster > 1 {
                            format!("(({chunk}) * {} + tid) * LF_V", self.plan.threads_per_group)
                        } else {
                            "i0".to_string()
                        };
                        self.line(&format!(
                            "const {ty}* q = reinterpret_cast<const {ty}*>(lf_rowbuf + {at}); // prefetched row"
                        ));
                    } else if !(staged || preloaded) {
                        self.line(&format!(
                            "const {ty}* q = reinterpret_cast<const {ty}*>({ptr} + {base}i0);"
                        ));
                    }
                    for k in 0..vec.words / vec.per_access {
                        self.open("{");
                        if staged {
                            let accesses = vec.words / vec.per_access;
                            self.line(&format!(
                                "const {ty} a = lf_stage_{}[(({chunk}) * {accesses} + {k}) * LF_T + tid];",
                                ident(buffer)
                            ));
                        } else if batched {
                            self.line(&format!("const {ty} a = lf_b{}[{chunk}][{k}];", val.0));
                        } else if preloaded {
                            self.line(&format!(
                                "const {ty} a = lf_t{p}_{}[{k}]; // loaded before the complete chunks",
                                val.0
                            ));
                        } else {
                            let access = self.vector_access(p, *val, buffer, k);
                            if in_shared(*val) {
                                self.line(&format!(
                                    "const {ty} a = lf_shc ? lf_sh[((({chunk}) - LF_SH0) * {} + {k}) * LF_T + tid] : {access};",
                                    vec.words / vec.per_access
                                ));
                            } else if early.is_some_and(|(_, out)| out == p)
                                && self.buffer_kind(buffer) == BufferKind::Column
                                && self.early_complete_chunks() > 0
                            {
                                // Chunks below the count were loaded early; the
                                // loop is unrolled, so this choice is static.
                                self.line(&format!(
                                    "const {ty} a = {chunk} < {} ? lf_e{}[{chunk}][{k}] : {access};",
                                    self.early_complete_chunks(),
                                    val.0
                                ));
                            } else {
                                self.line(&format!("const {ty} a = {access};"));
                            }
                        }
                        self.emit_access_words(vec, k);
                        self.close();
                    }
                    if self.packs(*val) {
                        // The loaded words are the packed slots (except
                        // where shared memory holds them).
                        let guard = if in_shared(*val) { "if (!lf_shc) " } else { "" };
                        for k in 0..vec.words {
                            self.line(&format!(
                                "{guard}r{}[({chunk}) * (LF_V / 2) + {k}] = wd[{k}];",
                                val.0
                            ));
                        }
                    }
                    self.emit_widened_words(&arr);
                    self.close();
                }
                None => {
                    self.line("#pragma unroll");
                    self.open(&format!("for (int e = 0; e < {count}; ++e) {{"));
                    if guarded.is_some() {
                        let valid = self.in_row("i0 + e");
                        self.line(&format!(
                            "{arr}[e] = ({valid}) ? lf_widen({ptr}[{base}i0 + e]) : 0.0f;"
                        ));
                    } else {
                        self.line(&format!("{arr}[e] = lf_widen({ptr}[{base}i0 + e]);"));
                    }
                    self.close();
                }
            }
        }
        // A shared tile after its first phase: its shared chunks read back.
        if let (Some((val, _)), Some(vec)) = (&shared, vector) {
            if self.needed(val.index(), p) && self.demanded[val.index()].first() != Some(&p) {
                let ty = vec.access_type();
                let accesses = vec.words / vec.per_access;
                self.line(&format!("float s{}[LF_V];", val.0));
                self.open("if (lf_shc) {");
                self.line(&format!("unsigned wd[{}];", vec.words));
                for k in 0..accesses {
                    self.open("{");
                    self.line(&format!(
                        "const {ty} a = lf_sh[((({chunk}) - LF_SH0) * {accesses} + {k}) * LF_T + tid];"
                    ));
                    self.emit_access_words(vec, k);
                    self.close();
                }
                self.emit_widened_words(&format!("s{}", val.0));
                self.close();
            }
        }
        // Row outputs stored this phase, staged for a vector store.
        let stores: Vec<(String, Value)> = body
            .iter()
            .filter_map(|instr| match instr {
                Instr::Store { buffer, value }
                    if self.kinds[value.index()] == Kind::Tile
                        && self.phase[value.index()] == p =>
                {
                    Some((buffer.clone(), *value))
                }
                _ => None,
            })
            .collect();
        if vector.is_some() {
            for (buffer, _) in &stores {
                self.line(&format!("float o_{}[LF_V];", ident(buffer)));
            }
        }

        // Online normalizers take the pack's maximum first, so the running
        // sum is rescaled at most once per pack, with no per-element branch.
        let sum_exps = self.sum_exps_in(p);
        for &(ks, ..) in &sum_exps {
            self.line(&format!("float lf_pm{ks} = {};", identity(ReduceOp::Max)));
            self.line(&format!("float lf_px{ks}[{count}];"));
        }
        self.line("#pragma unroll");
        self.open(&format!("for (int e = 0; e < {count}; ++e) {{"));
        if guarded.is_some() {
            let valid = self.in_row("i0 + e");
            self.open(&format!("if ({valid}) {{"));
        }
        for (at, instr) in body.iter().enumerate() {
            if !self.needed(at, p) {
                continue;
            }
            let val = Value(at as u32);
            let t = self.name(val);
            let n = |x: &Value| self.name(*x);
            // A resident tile after its first phase: read from its slots.
            let kept = self.is_resident(val) && self.demanded[at].first() != Some(&p);
            let expr = match instr {
                _ if kept && self.packs(val) => {
                    let slot = format!("r{}[({chunk} * LF_V + e) >> 1]", val.0);
                    let slots = format!("lf_rewiden<{p}>({slot}, e & 1)");
                    if in_shared(val) {
                        format!("lf_shc ? s{}[e] : {slots}", val.0)
                    } else {
                        slots
                    }
                }
                _ if kept && in_shared(val) => {
                    format!("lf_shc ? s{0}[e] : r{0}[{chunk} * LF_V + e]", val.0)
                }
                _ if kept => format!("r{}[{chunk} * LF_V + e]", val.0),
                Instr::Load { .. } => format!("l{}[e]", val.0),
                Instr::Unary { op, arg } => unary(*op, &n(arg)),
                Instr::Binary { op, lhs, rhs } => binary(*op, &n(lhs), &n(rhs)),
                Instr::Broadcast(s) if self.hidden_scalars.contains(&s.index()) => {
                    format!("h{}", s.0)
                }
                Instr::Broadcast(s) => n(s),
                Instr::RoundToStorage(x) => format!("lf_round({})", n(x)),
                Instr::MaskIndex { tile, index } => {
                    format!("((long long)(i0 + e) == {}) ? {} : 0.0f", n(index), n(tile))
                }
                other => unreachable!("not a tile instruction: {other:?}"),
            };
            self.line(&format!("const float {t} = {expr};"));
            // A resident tile's first phase fills its slots; a packed
            // load's slots are its loaded words (`emit_pack`), a packed
            // rounded tile's, and a guarded load's (read element by
            // element, widened exactly), are its storage bits, two to a word.
            let loaded = matches!(instr, Instr::Load { .. }) && guarded.is_none();
            if self.is_resident(val) && !kept {
                let slot = format!("r{}[({chunk} * LF_V + e) >> 1]", val.0);
                match (self.packs(val), loaded) {
                    (true, true) => {}
                    (true, false) => self.line(&format!(
                        "if ((e & 1) == 0) {slot} = lf_bits({t}); else {slot} |= lf_bits({t}) << 16;"
                    )),
                    (false, _) => {
                        let guard = if in_shared(val) { "if (!lf_shc) " } else { "" };
                        self.line(&format!("{guard}r{}[{chunk} * LF_V + e] = {t};", val.0))
                    }
                }
            }
        }
        for (k, _, op, arg) in self.plain_reductions_in(p) {
            let acc = format!("a{k}");
            let c = combine(op, &acc, &self.name(arg));
            self.line(&format!("{acc} = {c};"));
        }
        for &(ks, _, arg, _) in &sum_exps {
            let x = self.name(arg);
            self.line(&format!("lf_px{ks}[e] = {x};"));
            self.line(&format!("lf_pm{ks} = fmaxf(lf_pm{ks}, {x});"));
        }
        for (buffer, value) in &stores {
            let s = if vector.is_some() {
                format!("o_{}[e] = {};", ident(buffer), self.name(*value))
            } else {
                format!(
                    "if (row_ok) p_{}[row_off + i0 + e] = lf_narrow({});",
                    ident(buffer),
                    self.name(*value)
                )
            };
            self.line(&s);
        }
        if guarded.is_some() {
            self.close();
        }
        self.close();
        for &(ks, km, ..) in &sum_exps {
            // An empty running pair has sum 0, so rescaling it is harmless.
            self.open(&format!("if (lf_pm{ks} > a{km}) {{"));
            self.line(&format!("a{ks} *= lf_exp(a{km} - lf_pm{ks});"));
            self.line(&format!("a{km} = lf_pm{ks};"));
            self.close();
            // A running maximum of -inf: every element so far is -inf (a
            // mask) or NaN; exp(x - 0) adds 0 for -inf where exp(-inf -
            // -inf) would add NaN, and keeps a NaN (the CPU executor's
            // `online_push_pack`).
            self.line(&format!(
                "const float lf_bm{ks} = a{km} == {} ? 0.0f : a{km};",
                lit(f32::NEG_INFINITY)
            ));
            self.line("#pragma unroll");
            self.open(&format!("for (int e = 0; e < {count}; ++e) {{"));
            if guarded.is_some() {
                let valid = self.in_row("i0 + e");
                self.line(&format!(
                    "if ({valid}) a{ks} += lf_exp(lf_px{ks}[e] - lf_bm{ks});"
                ));
            } else {
                self.line(&format!("a{ks} += lf_exp(lf_px{ks}[e] - lf_bm{ks});"));
            }
            self.close();
        }

        if let Some(vec) = vector {
            for (buffer, _) in &stores {
                let ty = vec.access_type();
                let o = format!("o_{}", ident(buffer));
                self.open("if (row_ok) {");
                self.line(&format!(
                    "{ty}* q = reinterpret_cast<{ty}*>(p_{} + row_off + i0);",
                    ident(buffer)
                ));
                for k in 0..vec.words / vec.per_access {
                    self.open("{");
                    self.line(&format!("{ty} a;"));
                    for (f, field) in vec.fields().iter().enumerate() {
                        let word = k * vec.per_access + f;
                        let bits = if self.dtype == DType::F32 {
                            format!("lf_bits({o}[{word}])")
                        } else {
                            format!(
                                "lf_bits({o}[{}]) | (lf_bits({o}[{}]) << 16)",
                                2 * word,
                                2 * word + 1
                            )
                        };
                        let dst = if field.is_empty() {
                            "a".to_string()
                        } else {
                            format!("a.{field}")
                        };
                        self.line(&format!("{dst} = {bits};"));
                    }
                    if self.plan.streaming_hints {
                        self.line(&format!("lf_st_cs(q + {k}, a);"));
                    } else if self.plan.aligned_packs {
                        self.line(&format!("lf_st(q + {k}, a);"));
                    } else {
                        self.line(&format!("q[{k}] = a;"));
                    }
                    self.close();
                }
                self.close();
            }
        }
    }

    /// This thread's index among its row's threads in the group (`tid`
    /// with one row per group).
    fn row_thread(&self) -> String {
        if self.g == 1 {
            "tid".to_string()
        } else {
            format!("tid % {}", self.plan.row_threads_per_group())
        }
    }

    /// The group level of a pushed cluster reduction: threads 0..c push
    /// this group's partials to group `tid`, every thread waits for its own
    /// group's c partials, and lane r combines group r's, as the pulled
    /// form does: the same combining order.
    fn emit_pushed_group_level(
        &mut self,
        push: Push,
        all: &[usize],
        plain: &[(usize, Value, ReduceOp, Value)],
        pairs: &[(usize, usize, Value, Value)],
    ) {
        let c = self.cluster;
        self.line(&format!(
            "// group level: {c} groups of the cluster, partials pushed by st.async"
        ));
        if !self.cluster_waited {
            self.line("asm volatile(\"barrier.cluster.wait.aligned;\" ::: \"memory\"); // every group's mbarriers are ready");
            self.cluster_waited = true;
        }
        // A persistent cluster's row uses set `lf_set` of slots and barriers.
        let persistent = push.sets > 1;
        let reductions = self.reductions;
        let barrier = |k: usize| {
            if persistent {
                format!(
                    "reinterpret_cast<unsigned long long*>(lf_smem + {} + 2 * (lf_set * {} + {k}))",
                    push.barriers, reductions
                )
            } else {
                format!(
                    "reinterpret_cast<unsigned long long*>(lf_smem + {})",
                    push.barriers + 2 * k
                )
            }
        };
        let g = self.g;
        let per_set = reductions * c * g;
        let slot = |k: usize| {
            if persistent {
                format!("{} + lf_set * {per_set}", push.slots + k * c * g)
            } else {
                (push.slots + k * c * g).to_string()
            }
        };
        // With G rows, row r's partials go to slots [r * c, r * c + c).
        // Thread t < c of each row pushes that row's partials to group t.
        let t = self.row_thread();
        let row_slot = if g == 1 {
            String::new()
        } else {
            format!(" + row_in_group * {c}")
        };
        self.open(&format!("if ({t} < {c}) {{"));
        for &k in all {
            self.line(&format!(
                "lf_push(&lf_smem[{}{row_slot} + rank], {}, {t}, a{k});",
                slot(k),
                barrier(k)
            ));
        }
        self.close();
        for &k in all {
            if persistent {
                self.line(&format!("lf_push_wait_parity({}, lf_parity);", barrier(k)));
            } else {
                self.line(&format!("lf_push_wait({});", barrier(k)));
            }
        }
        self.emit_group_combine(plain, pairs, |k| {
            format!("lf_smem[{}{row_slot} + lane]", slot(k))
        });
        if persistent {
            // The row after next pushes into this set: arm its barriers.
            // Its pushes cannot come before this group's next row's push,
            // which follows this group's reads of the set.
            self.open("if (tid == 0) {");
            for &k in all {
                self.line(&format!("lf_push_arm({}, {});", barrier(k), 4 * c * g));
            }
            self.close();
        }
    }

    /// Lane r of every warp reads group r's partial of each reduction
    /// (`read(k)`) and the warp combines them by butterfly over the
    /// cluster's groups, so every thread ends with the row's value.
    fn emit_group_combine(
        &mut self,
        plain: &[(usize, Value, ReduceOp, Value)],
        pairs: &[(usize, usize, Value, Value)],
        read: impl Fn(usize) -> String,
    ) {
        let c = self.cluster;
        for (k, _, op, _) in plain {
            self.open("{");
            self.line(&format!(
                "float b = lane < {c} ? {} : {};",
                read(*k),
                identity(*op)
            ));
            let mut off = c / 2;
            while off >= 1 {
                let comb = combine(*op, "b", &format!("__shfl_xor_sync(0xffffffffu, b, {off})"));
                self.line(&format!("b = {comb};"));
                off /= 2;
            }
            self.line(&format!("a{k} = __shfl_sync(0xffffffffu, b, 0);"));
            self.close();
        }
        for &(ks, km, ..) in pairs {
            let loads = (
                format!("lane < {c} ? {} : {}", read(km), identity(ReduceOp::Max)),
                format!("lane < {c} ? {} : 0.0f", read(ks)),
            );
            self.emit_pair_butterfly(ks, km, loads, c);
        }
    }

    fn emit_tree(&mut self, p: usize) {
        let reds = self.reductions_in(p);
        let plain = self.plain_reductions_in(p);
        let pairs = self.sum_exps_in(p);
        if reds.is_empty() && pairs.is_empty() {
            return;
        }
        // Every accumulator that crosses shared memory: the plain ones (a
        // paired maximum included) and the online sums.
        let mut all: Vec<usize> = reds.iter().map(|r| r.0).collect();
        all.extend(pairs.iter().map(|p| p.0));
        let lanes = self.lanes;
        if lanes > 1 {
            self.line(&format!("// lane level: butterfly over {lanes} lanes"));
            for (k, _, op, _) in &plain {
                let mut off = lanes / 2;
                while off >= 1 {
                    let c = combine(
                        *op,
                        &format!("a{k}"),
                        &format!("__shfl_xor_sync(lf_mask, a{k}, {off})"),
                    );
                    self.line(&format!("a{k} = {c};"));
                    off /= 2;
                }
            }
            for &(ks, km, ..) in &pairs {
                self.emit_pair_shuffles(&format!("a{km}"), &format!("a{ks}"), "lf_mask", lanes);
            }
        }
        if self.warps > 1 {
            let warps = self.warps;
            let region = self.g * warps;
            self.line(&format!(
                "// warp level: {warps} warps through shared memory"
            ));
            for k in &all {
                self.line(&format!(
                    "if (lane == 0) lf_smem[{} + (tid >> 5)] = a{k};",
                    k * region
                ));
            }
            self.line("__syncthreads();");
            let slot =
                |k: usize| format!("lf_smem[{} + row_in_group * {warps} + lane]", k * region);
            for (k, _, op, _) in &plain {
                self.open("{");
                self.line(&format!(
                    "float b = lane < {warps} ? {} : {};",
                    slot(*k),
                    identity(*op)
                ));
                let mut off = warps / 2;
                while off >= 1 {
                    let c = combine(*op, "b", &format!("__shfl_xor_sync(0xffffffffu, b, {off})"));
                    self.line(&format!("b = {c};"));
                    off /= 2;
                }
                self.line(&format!("a{k} = __shfl_sync(0xffffffffu, b, 0);"));
                self.close();
            }
            for &(ks, km, ..) in &pairs {
                let loads = (
                    format!(
                        "lane < {warps} ? {} : {}",
                        slot(km),
                        identity(ReduceOp::Max)
                    ),
                    format!("lane < {warps} ? {} : 0.0f", slot(ks)),
                );
                self.emit_pair_butterfly(ks, km, loads, warps);
            }
        }
        if let Some(push) = self.push {
            self.emit_pushed_group_level(push, &all, &plain, &pairs);
        } else if self.cluster > 1 {
            let c = self.cluster;
            let base = self.reductions * self.g * if self.warps > 1 { self.warps } else { 0 };
            self.line(&format!(
                "// group level: {c} groups of the cluster through distributed shared memory"
            ));
            let g = self.g;
            // With G rows, each row's first thread writes its own slot.
            let writer = self.row_thread();
            let row_slot = if g == 1 { "" } else { " + row_in_group" };
            for k in &all {
                self.line(&format!(
                    "if ({writer} == 0) lf_smem[{}{row_slot}] = a{k};",
                    base + k * g
                ));
            }
            self.line("lf_cluster_sync();");
            self.emit_group_combine(&plain, &pairs, |k| {
                format!(
                    "lf_cluster_load(&lf_smem[{}{row_slot}], lane)",
                    base + k * g
                )
            });
        }
        for (k, r, ..) in &reds {
            let s = format!("const float {} = a{k};", self.name(*r));
            self.line(&s);
        }
        for (ks, _, _, r) in &pairs {
            let s = format!("const float {} = a{ks};", self.name(*r));
            self.line(&s);
        }
    }

    /// Warp- or group-level butterfly of an online normalizer's (max, sum)
    /// pairs over `width` lanes, loaded by `loads`; every lane ends with
    /// the row's pair.
    fn emit_pair_butterfly(&mut self, ks: usize, km: usize, loads: (String, String), width: usize) {
        self.open("{");
        self.line(&format!("float bm = {};", loads.0));
        self.line(&format!("float bs = {};", loads.1));
        self.emit_pair_shuffles("bm", "bs", "0xffffffffu", width);
        self.line(&format!("a{km} = __shfl_sync(0xffffffffu, bm, 0);"));
        self.line(&format!("a{ks} = __shfl_sync(0xffffffffu, bs, 0);"));
        self.close();
    }

    /// Start copying this worker's packs of every column input into its
    /// slots of the stage (`[chunk][access][thread]`, so a warp's accesses
    /// are consecutive) with `cp.async`, before the row is loaded: the
    /// copies hold no registers and land while the row is reduced. Each
    /// worker reads back only what it copied, after its own
    /// `cp.async.wait_all` ([`Ctx::emit_phase`]), so no barrier is needed.
    fn emit_column_stage(&mut self, stage: &ColumnStage, vec: Vector) {
        let ty = vec.access_type();
        let bytes = 4 * vec.per_access;
        let per_column = stage.slice_bytes / bytes as u64;
        for (i, name) in self.column_names().iter().take(stage.columns).enumerate() {
            self.line(&format!(
                "{ty}* lf_stage_{name} = reinterpret_cast<{ty}*>(lf_smem + {}) + {};",
                stage.offset_floats,
                i as u64 * per_column
            ));
            self.emit_chunk_copies(
                &format!("lf_stage_{name}"),
                &format!("p_{name}"),
                "0",
                4,
                vec,
            );
        }
        self.line("asm volatile(\"cp.async.commit_group;\" ::: \"memory\");");
    }

    /// The first phase that reads a staged column input.
    fn first_staged_phase(&self) -> Option<usize> {
        self.program
            .body
            .iter()
            .enumerate()
            .filter(|(_, i)| matches!(i, Instr::Load { buffer } if self.is_staged(buffer)))
            .filter_map(|(at, _)| self.demanded[at].first().copied())
            .min()
    }

    /// Is the row element `i` (an int expression) in the row? Aligned
    /// packs start before it (`i` < 0 in the head pack).
    fn in_row(&self, i: &str) -> String {
        if self.aligned_chunks > 0 {
            format!("(unsigned)({i}) < (unsigned)LF_N")
        } else {
            format!("{i} < LF_N")
        }
    }

    /// The complete chunks' loop unrolled fully (`whole`: slots indexed by
    /// chunk, or batched loads) or U times.
    fn emit_chunk_unroll(&mut self, whole: bool) {
        if whole {
            self.line("#pragma unroll");
        } else {
            let u = self.plan.layout.unroll;
            self.line(&format!("#pragma unroll {u}"));
        }
    }

    /// An aligned-packs phase's chunks ([`Plan::aligned_packs`]): chunk 0
    /// and the chunks from `LF_FULL` on may hold the row's ends, so each
    /// worker takes its pack there as a vector where the pack lies wholly
    /// in the row and element by element, guarded, where it does not; the
    /// chunks between are whole for every row.
    fn emit_aligned_chunks(&mut self, p: usize, needs_slots: bool) {
        let guarded = |cx: &mut Self, c: usize| {
            cx.open(&format!(
                "{{ // chunk {c}: whole packs as vectors, the row's ends guarded"
            ));
            let i = format!("(({c} * LF_W + w) * LF_V - lf_s)");
            cx.open(&format!("if ({i} >= 0 && {i} <= LF_N - LF_V) {{"));
            cx.emit_pack(p, &c.to_string(), None, false);
            cx.close();
            cx.open("else {");
            cx.emit_pack(p, &c.to_string(), Some(cx.v), false);
            cx.close();
            cx.close();
        };
        guarded(self, 0);
        if self.full > 1 {
            self.emit_chunk_unroll(needs_slots);
            self.open("for (int c = 1; c < LF_FULL; ++c) {");
            self.emit_pack(p, "c", None, false);
            self.close();
        }
        for c in self.full.max(1)..self.aligned_chunks {
            guarded(self, c);
        }
    }

    /// Is `buffer` one of the column inputs staged in shared memory?
    /// What a pack offset of `buffer` is added to: the row's offset for
    /// row buffers, nothing for columns.
    fn row_base(&self, buffer: &str) -> &'static str {
        match self.buffer_kind(buffer) {
            BufferKind::Row => "row_off + ",
            _ => "",
        }
    }

    /// The tile loads phase `p` reads from global memory: every load it
    /// needs that no earlier phase left resident.
    fn global_loads(&self, p: usize) -> Vec<(Value, String)> {
        let mut loads = vec![];
        for (at, instr) in self.program.body.iter().enumerate() {
            if let Instr::Load { buffer } = instr {
                if !self.needed(at, p) {
                    continue;
                }
                let val = Value(at as u32);
                let first = self.demanded[at].first() == Some(&p);
                if !self.is_resident(val) || first {
                    loads.push((val, buffer.clone()));
                }
            }
        }
        loads
    }

    /// The expression that loads access `k` of a vector pack of `buffer`
    /// through `q`, with the cache policy its plan gives it in phase `p`.
    fn vector_access(&self, p: usize, val: Value, buffer: &str, k: usize) -> String {
        let kind = self.buffer_kind(buffer);
        let prefetched = self.prefetched.as_deref() == Some(buffer);
        // A row tile read once (no later phase re-reads it from memory)
        // may be evicted first; columns are reused.
        let streamed = self.plan.streaming_hints
            && kind == BufferKind::Row
            && !prefetched
            && !self.plan.rereads_tiles();
        // A re-read row tile: kept by its first load, let go by its last.
        // Columns (weight, bias), which every row reads, are kept too.
        let phases = &self.demanded[val.index()];
        let reread = self.plan.reread_hints && kind == BufferKind::Row && phases.len() > 1;
        // Row tiles bypass L1 so the columns stay there.
        let bypass_l1 = self.plan.l1_columns && kind == BufferKind::Row && !prefetched;
        const KEEP: (&str, &str) = ("lf_ld_keep", "lf_keep");
        const DROP: (&str, &str) = ("lf_ld_drop", "lf_drop");
        let policy = if keeps_columns(self.plan) && kind == BufferKind::Column {
            Some(KEEP)
        } else if !reread {
            None
        } else if phases.first() == Some(&p) {
            Some(KEEP)
        } else if phases.last() == Some(&p) {
            Some(DROP)
        } else {
            None
        };
        if self.plan.ordered_columns && kind == BufferKind::Column {
            match policy {
                Some((_, pol)) => format!("lf_ld_ord_keep(q + {k}, {pol})"),
                None => format!("lf_ld_ord(q + {k})"),
            }
        } else if streamed {
            format!("lf_ld_cs(q + {k})")
        } else if let (Some((load, pol)), false) = (policy, prefetched) {
            let load = if bypass_l1 { "lf_ld_na_hint" } else { load };
            format!("{load}(q + {k}, {pol})")
        } else if bypass_l1 {
            format!("lf_ld_na(q + {k})")
        } else {
            format!("q[{k}]")
        }
    }

    /// Does phase `p` issue all its packs' loads before it computes on
    /// any ([`Plan::batched_loads`])? Streamed plans whose whole row is one
    /// unrolled chunk loop, vector packs, nothing staged or prefetched.
    fn batches_loads(&self, p: usize) -> bool {
        self.plan.batched_loads
            && self.vector.is_some()
            && self.prefetched.is_none()
            && self.partial == 0
            && self.full > 0
            && self
                .global_loads(p)
                .iter()
                .all(|(_, buffer)| !self.is_staged(buffer))
    }

    /// May the partial chunk take whole packs as vectors? Where at least
    /// one worker's pack lies wholly inside the row, the access is
    /// vectorisable and no variant keeps per-chunk state (shared chunks)
    /// that the vector path would index by the partial chunk. Same
    /// arithmetic in the same order as the guarded form.
    ///
    /// Only where the partial chunk is much of the row (at most one
    /// complete chunk, or a quarter of the row), or in a register plan of
    /// at most four complete chunks (its partial chunk then loads with
    /// them, [`Self::preloads_partial`]): there it gained 1.1-1.6x, while
    /// on rows of many chunks the second copy of the pack code cost 2-17%
    /// (bf16 cross_entropy 16384x32000 at U=4: 0.83x).
    fn whole_packs_in_partial_chunk(&self) -> bool {
        let n = self.plan.shape().n;
        let rest = n % self.plan.layout.chunk_span();
        (self.full <= 1 || 4 * rest >= n || (self.registers && self.full <= 4))
            && self.partial == self.v
            && self.vector.is_some()
            && self.prefetched.is_none()
            && self.shared_tile().is_none()
            && !self.plan.packed_resident
    }

    /// Does a register plan's phase load its partial chunk's whole pack
    /// before its complete chunks? Loaded after them, in the branch that
    /// follows their loop, it waits on their sums: a second memory round
    /// trip per phase, which the decode searches of 2026-12-03 priced at
    /// 0.2-0.4 µs (every plan whose packs end in a partial chunk lost to
    /// one without).
    fn preloads_partial(&self) -> bool {
        self.registers && self.partial > 0 && self.whole_packs_in_partial_chunk()
    }

    /// The partial chunk's whole-pack vector loads of phase `p` into
    /// `lf_t<phase>_<value>[access]`, where this worker's pack lies wholly
    /// in the row (`lf_whole<phase>`); columns loaded early and staged ones
    /// are left to their own paths.
    fn emit_partial_preload(&mut self, p: usize) {
        let vec = self.vector.expect("whole packs are vector packs");
        let ty = vec.access_type();
        let accesses = vec.words / vec.per_access;
        let early =
            self.early_columns().is_some_and(|(_, out)| out == p) && self.early_partial_columns();
        let loads: Vec<(Value, String)> = self
            .global_loads(p)
            .into_iter()
            .filter(|(_, buffer)| {
                !(self.is_staged(buffer) || early && self.buffer_kind(buffer) == BufferKind::Column)
            })
            .collect();
        if loads.is_empty() {
            return;
        }
        self.line("// the partial chunk's whole pack, loaded before the complete chunks");
        self.line(&format!(
            "const bool lf_whole{p} = (LF_FULL * LF_W + w) * LF_V + LF_V <= LF_N;"
        ));
        for (val, _) in &loads {
            self.line(&format!("{ty} lf_t{p}_{}[{accesses}] = {{}};", val.0));
        }
        self.open(&format!("if (lf_whole{p}) {{"));
        self.line("const int i0 = (LF_FULL * LF_W + w) * LF_V;");
        self.emit_vector_loads(p, &loads, |val, k| format!("lf_t{p}_{}[{k}]", val.0));
        self.close();
        self.preloaded = loads.into_iter().map(|(val, _)| val).collect();
    }

    /// Phase `p`'s loads for every chunk into `lf_b<value>[chunk][access]`,
    /// issued before the chunk loop computes on any (see
    /// [`Self::batches_loads`]).
    fn emit_batched_loads(&mut self, p: usize) {
        let loads = self.global_loads(p);
        self.emit_chunk_loads(p, &loads, "lf_b", "LF_FULL");
    }

    /// Phase `p`'s vector `loads` of chunks `0..chunks` into
    /// `<array><value>[chunk][access]`, each with the cache policy phase
    /// `p` gives it, issued in one unrolled loop.
    fn emit_chunk_loads(&mut self, p: usize, loads: &[(Value, String)], array: &str, chunks: &str) {
        let vec = self.vector.expect("chunk loads are vector loads");
        let ty = vec.access_type();
        let accesses = vec.words / vec.per_access;
        for (val, _) in loads {
            self.line(&format!("{ty} {array}{}[{chunks}][{accesses}];", val.0));
        }
        self.line("#pragma unroll");
        self.open(&format!("for (int c = 0; c < {chunks}; ++c) {{"));
        self.line("const int i0 = (c * LF_W + w) * LF_V;");
        self.emit_vector_loads(p, loads, |val, k| format!("{array}{}[c][{k}]", val.0));
        self.close();
    }

    /// Phase `p`'s vector `loads` of the pack at `i0`, each access into
    /// `dst(value, access)`, with the cache policy phase `p` gives it.
    fn emit_vector_loads(
        &mut self,
        p: usize,
        loads: &[(Value, String)],
        dst: impl Fn(Value, usize) -> String,
    ) {
        let vec = self.vector.expect("vector loads");
        let ty = vec.access_type();
        for (val, buffer) in loads {
            let base = self.row_base(buffer);
            self.open("{");
            self.line(&format!(
                "const {ty}* q = reinterpret_cast<const {ty}*>(p_{} + {base}i0);",
                ident(buffer)
            ));
            for k in 0..vec.words / vec.per_access {
                let access = self.vector_access(p, *val, buffer, k);
                self.line(&format!("{} = {access};", dst(*val, k)));
            }
            self.close();
        }
    }

    fn is_staged(&self, buffer: &str) -> bool {
        let staged = self.plan.column_stage.map_or(0, |stage| stage.columns);
        self.program
            .column_inputs()
            .take(staged)
            .any(|d| d.name == buffer)
    }

    /// C names of the column inputs, in program order.
    fn column_names(&self) -> Vec<String> {
        self.program
            .column_inputs()
            .map(|d| ident(&d.name))
            .collect()
    }

    /// A pushed reduction's `mbarrier`s, each armed for its first phase
    /// (both sets of a persistent cluster), then the relaxed arrive that
    /// publishes them, waited for before the first push. One thread inits
    /// and arms them all: with one thread a barrier, the compiler ran the
    /// inits as one warp-uniform loop, which compute-sanitizer's racecheck
    /// took for one thread writing another's barrier (warnings, H100).
    fn emit_push_init(&mut self) {
        let Some(push) = self.push else {
            return;
        };
        let (cluster, g) = (self.cluster, self.g);
        self.line(&format!(
            "// pushed reduction: mbarrier k awaits {} partials of reduction k, 4 bytes each",
            cluster * g
        ));
        self.open("if (tid == 0) {");
        self.line("#pragma unroll");
        self.open(&format!(
            "for (int k = 0; k < {}; ++k) {{",
            self.reductions * push.sets
        ));
        self.line(&format!(
            "const unsigned bar = lf_shared_addr(lf_smem + {} + 2 * k);",
            push.barriers
        ));
        self.line(
            "asm volatile(\"mbarrier.init.shared::cta.b64 [%0], 1;\" :: \"r\"(bar) : \"memory\");",
        );
        self.line(&format!(
            "asm volatile(\"mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], {};\" :: \"r\"(bar) : \"memory\");",
            4 * cluster * g
        ));
        self.close();
        self.close();
        self.line("asm volatile(\"fence.mbarrier_init.release.cluster;\" ::: \"memory\");");
        self.line("asm volatile(\"barrier.cluster.arrive.relaxed.aligned;\" ::: \"memory\"); // waited for before the first push");
    }

    /// The private slots of each resident tile.
    fn emit_resident_declarations(&mut self) {
        if !self.registers {
            return;
        }
        let slots = self.plan.slot_bound;
        for r in self.resident.clone() {
            if self.plan.packed_resident {
                self.line(&format!(
                    "unsigned r{}[{}]; // private slots of a resident tile, two 16-bit values each",
                    r.0,
                    slots / 2
                ));
            } else {
                self.line(&format!(
                    "float r{}[{slots}]; // private slots of a resident tile",
                    r.0
                ));
            }
        }
    }

    fn emit_phase(&mut self, p: usize) {
        if p == 0 && self.plan.l2_prefetch_rows > 0 {
            self.emit_l2_prefetch();
        }
        self.line(&format!("// ---- phase {p} ----"));
        if self.in_place_store_phase() == Some(p)
            && self.warps == 1
            && self.cluster == 1
            && self.lanes > 1
        {
            // A row of one warp's lanes met at shuffles only, which order
            // no memory: its reads of elements other lanes own (the
            // gathered target) precede the stores over them only here.
            self.line("__syncwarp(lf_mask); // in place: the row's reads before its stores");
        }
        self.emit_scalars(p);
        self.emit_gathers(p);
        self.hidden_scalars.clear();
        if !self.has_tile_work(p) {
            return;
        }
        if self.plan.recompute_derived {
            self.hide_rebroadcast_scalars(p);
        }
        if self.plan.staged_columns() && self.first_staged_phase() == Some(p) {
            self.line("asm volatile(\"cp.async.wait_all;\" ::: \"memory\"); // this worker's staged columns");
        }
        // Packed tiles re-read here: hide their words from the compiler,
        // so it widens them again instead of holding what an earlier phase
        // computed from them (f32 values, one register each).
        for r in self.resident.clone() {
            if self.packs(r)
                && self.needed(r.index(), p)
                && self.demanded[r.index()].first() != Some(&p)
            {
                // Only the slots registers hold.
                let chunks = if self.is_shared_tile(r) {
                    "LF_SH0"
                } else {
                    "LF_FULL"
                };
                self.line("#pragma unroll");
                self.open(&format!(
                    "for (int k = 0; k < {chunks} * (LF_V / 2); ++k) {{"
                ));
                self.line(&format!("asm volatile(\"\" : \"+r\"(r{}[k]));", r.0));
                self.close();
            }
        }
        for (k, _, op, _) in self.reductions_in(p) {
            self.line(&format!("float a{k} = {};", identity(op)));
        }
        for (ks, ..) in self.sum_exps_in(p) {
            self.line(&format!("float a{ks} = 0.0f;"));
        }
        // Only register plans fill slots here; a streamed plan's loop is
        // unrolled U times, never fully (fully unrolled 32-chunk loops of a
        // 1024-thread streamed plan spilled 600-900 bytes per thread on the
        // H200: 2026-11-29-long-rows-search-g512-h200).
        let needs_slots = self.registers && self.resident.iter().any(|r| self.needed(r.index(), p));
        if let Some((hook, out)) = self.early_columns() {
            if hook == p && self.early_partial_columns() {
                self.emit_early_partial_column_loads(out);
            }
        }
        self.preloaded.clear();
        if self.preloads_partial() {
            self.emit_partial_preload(p);
        }
        let batched = self.batches_loads(p);
        if batched {
            self.open("{ // this phase's loads, all issued before the chunk loop");
            self.emit_batched_loads(p);
        }
        if self.aligned_chunks > 0 {
            self.emit_aligned_chunks(p, needs_slots);
        } else if self.full > 0 {
            self.emit_chunk_unroll(needs_slots || batched);
            self.open("for (int c = 0; c < LF_FULL; ++c) {");
            self.emit_pack(p, "c", None, batched);
            self.close();
        }
        if batched {
            self.close();
        }
        if self.partial > 0 && self.whole_packs_in_partial_chunk() {
            // Guarded element loads are scalar and strided: a row shorter
            // than one chunk ran all of it that way, 1.7x slower than V=4
            // on short bf16 rmsnorm rows (2026-12-02-search-short-*).
            self.open("{ // the partial chunk: whole packs as vectors, the last one guarded");
            if self.preloaded.is_empty() {
                self.open("if ((LF_FULL * LF_W + w) * LF_V + LF_V <= LF_N) {");
            } else {
                self.open(&format!("if (lf_whole{p}) {{"));
            }
            self.emit_pack(p, "LF_FULL", None, false);
            self.close();
            self.open("else {");
            self.emit_pack(p, "LF_FULL", Some(self.partial), false);
            self.close();
            self.close();
            self.preloaded.clear();
        } else if self.partial > 0 {
            self.open("{ // the partial pack, guarded per element");
            self.emit_pack(p, "LF_FULL", Some(self.partial), false);
            self.close();
        }
        if let (Some(input), true) = (&self.prefetched, self.prefetch_phase == Some(p)) {
            let input = ident(input);
            let (next, share) = self.prefetch_source();
            self.line("__syncthreads(); // every thread has its slots: the buffer is free");
            self.line(&format!(
                "if (tid == 0 && {next} < rows) lf_prefetch(lf_rowbuf, p_{input} + (size_t)({next}) * LF_N{share}, lf_rowbar);"
            ));
        }
        if let Some((hook, out)) = self.early_columns() {
            if hook == p && self.early_complete_chunks() > 0 {
                self.emit_early_column_loads(out);
            }
        }
        self.emit_tree(p);
    }

    /// Each row input's share of row `row + LF_L2_AHEAD`, one bulk L2
    /// prefetch per chunk (`LF_L2_SHARE` contiguous elements a group),
    /// issued as the row starts: registers are free there (before the
    /// exchange the hint cost layernorm bf16 1024x262144 12 registers and
    /// its second group per SM), and the row that far ahead starts about
    /// one row's time later.
    fn emit_l2_prefetch(&mut self) {
        let ahead = self.plan.l2_prefetch_rows;
        let threads = self.plan.threads_per_group;
        let rank = if self.cluster > 1 {
            " + (size_t)rank * LF_L2_SHARE"
        } else {
            ""
        };
        self.line(&format!(
            "// row + {ahead}'s share into L2, so its DRAM reads are in flight before its group starts"
        ));
        self.open("if (row + LF_L2_AHEAD < rows) {");
        self.open(&format!(
            "for (int c = tid; c < LF_FULL; c += {threads}) {{"
        ));
        self.line(&format!(
            "const size_t at = (size_t)(row + LF_L2_AHEAD) * LF_N + (size_t)c * LF_W * LF_V{rank};"
        ));
        let inputs: Vec<String> = self
            .program
            .row_inputs()
            .map(|input| ident(&input.name))
            .collect();
        for input in inputs {
            self.line(&format!(
                "lf_prefetch_l2(p_{input} + at, LF_L2_SHARE * sizeof(p_{input}[0]));"
            ));
        }
        self.close();
        self.close();
    }

    /// Where [`Plan::early_columns`] applies: the phase whose reduction
    /// the early loads precede (the last one with a reduction before the
    /// first phase that loads columns) and that column phase.
    fn early_columns(&self) -> Option<(usize, usize)> {
        if self.plan.early_columns == 0 || self.vector.is_none() {
            return None;
        }
        let out = (0..self.plan.analysis.num_phases).find(|&q| {
            self.global_loads(q)
                .iter()
                .any(|(_, buffer)| self.buffer_kind(buffer) == BufferKind::Column)
        })?;
        let hook = (0..out)
            .rev()
            .find(|&p| !self.reductions_in(p).is_empty() || !self.sum_exps_in(p).is_empty())?;
        Some((hook, out))
    }

    /// Complete chunks whose columns load early.
    fn early_complete_chunks(&self) -> usize {
        (self.plan.early_columns as usize).min(self.full)
    }

    /// Do the partial chunk's columns load early too (an early count past
    /// the complete chunks)?
    fn early_partial_columns(&self) -> bool {
        self.plan.early_columns as usize > self.full && self.partial > 0
    }

    /// The partial chunk's column loads into `lf_ep<value>[LF_V]`, widened,
    /// issued as the phase starts: on a row of one or two chunks the
    /// columns' round trip then overlaps the row's own loads instead of
    /// following the reduction.
    fn emit_early_partial_column_loads(&mut self, out: usize) {
        let vec = self.vector.expect("early columns are vector loads");
        let ty = vec.access_type();
        let columns: Vec<_> = self
            .global_loads(out)
            .into_iter()
            .filter(|(_, buffer)| self.buffer_kind(buffer) == BufferKind::Column)
            .collect();
        self.line(&format!(
            "// the columns of phase {out}'s partial chunk, loaded before this phase's loads"
        ));
        for (val, _) in &columns {
            self.line(&format!("float lf_ep{}[LF_V];", val.0));
        }
        self.open("{");
        self.line("const int i0 = (LF_FULL * LF_W + w) * LF_V;");
        self.open("if (i0 + LF_V <= LF_N) {");
        for (val, buffer) in &columns {
            self.open("{");
            self.line(&format!("unsigned wd[{}];", vec.words));
            self.line(&format!(
                "const {ty}* q = reinterpret_cast<const {ty}*>(p_{} + {}i0);",
                ident(buffer),
                self.row_base(buffer)
            ));
            for k in 0..vec.words / vec.per_access {
                self.open("{");
                let access = self.vector_access(out, *val, buffer, k);
                self.line(&format!("const {ty} a = {access};"));
                self.emit_access_words(vec, k);
                self.close();
            }
            self.emit_widened_words(&format!("lf_ep{}", val.0));
            self.close();
        }
        self.close();
        self.open("else {");
        for (val, buffer) in &columns {
            self.line("#pragma unroll");
            self.line(&format!(
                "for (int e = 0; e < LF_V; ++e) lf_ep{}[e] = (i0 + e < LF_N) ? lf_widen(p_{}[{}i0 + e]) : 0.0f;",
                val.0,
                ident(buffer),
                self.row_base(buffer)
            ));
        }
        self.close();
        self.close();
    }

    /// The column loads of phase `out`'s first [`Plan::early_columns`]
    /// complete chunks into `lf_e<value>[chunk][access]`, issued before
    /// this phase's reduction so their round trip overlaps its exchange.
    fn emit_early_column_loads(&mut self, out: usize) {
        let early = self.early_complete_chunks();
        let columns: Vec<_> = self
            .global_loads(out)
            .into_iter()
            .filter(|(_, buffer)| self.buffer_kind(buffer) == BufferKind::Column)
            .collect();
        let chunks = if early == 1 { "chunk" } else { "chunks" };
        self.line(&format!(
            "// the columns of phase {out}'s first {early} {chunks}, loaded before this reduction's exchange"
        ));
        self.emit_chunk_loads(out, &columns, "lf_e", &early.to_string());
    }
}

/// Makes `w` opaque to the compiler (see [`Plan::folded_pack_addresses`]).
const HIDE_WORKER_INDEX: &str =
    "asm(\"\" : \"+r\"(w)); // keeps each pack's address a constant offset";

pub(crate) fn generate(plan: &Plan, options: &CodegenOptions) -> Result<Kernel, CodegenError> {
    let program = &plan.problem.program;
    let a = &plan.analysis;
    let layout = &plan.layout;
    let (rows, n) = (plan.shape().rows, plan.shape().n);
    let (w, v, g) = (
        layout.workers as usize,
        layout.pack as usize,
        layout.rows_per_group as usize,
    );
    let tree = plan.tree;
    let cluster = plan.groups_per_row as usize;
    let threads = plan.threads_per_group as usize;
    let inconsistent = |m: String| Err(CodegenError::Inconsistent(m));

    if a.kinds.len() != program.body.len() {
        return inconsistent("analysis does not describe the program".into());
    }
    if !w.is_power_of_two() || !v.is_power_of_two() || v > 8 {
        return inconsistent(format!("W={w} V={v}"));
    }
    if (tree.lanes * tree.warps * tree.groups) as usize != w
        || !(tree.lanes as usize).is_power_of_two()
        || tree.lanes > 32
        || (tree.warps > 1 && tree.lanes != 32)
        || tree.groups as usize != cluster
    {
        return inconsistent(format!(
            "tree {tree:?} does not match W={w}, {cluster} groups per row"
        ));
    }
    if threads == 0 || threads > 1024 {
        return Err(CodegenError::Unsupported(format!(
            "{threads} threads per group (at most 1024)"
        )));
    }
    if cluster > 1 {
        if threads != w / cluster * g
            || !(threads / g).is_multiple_of(32)
            || cluster > 16
            || !cluster.is_power_of_two()
        {
            return inconsistent(format!(
                "cluster of {cluster} groups x {threads} threads for W={w}, G={g}"
            ));
        }
        if tree.warps as usize * 32 * g != threads {
            return inconsistent(format!(
                "{} warps per row in a group of {threads} threads, G={g}",
                tree.warps
            ));
        }
    } else if threads != w * g {
        return inconsistent(format!("{threads} threads per group for W={w}, G={g}"));
    }
    if rows == 0 || n == 0 || n > i32::MAX as usize || rows > i32::MAX as usize {
        return Err(CodegenError::Unsupported(format!("shape {rows}x{n}")));
    }
    let expected_groups = rows.div_ceil(g) as u64 * cluster as u64;
    if plan.groups != expected_groups || plan.groups > i32::MAX as u64 {
        return inconsistent(format!("{} groups for {rows} rows", plan.groups));
    }

    // Parameters: buffers named as C identifiers, distinct.
    let mut params = vec![];
    let mut sig = vec![];
    let mut seen = BTreeSet::new();
    for (decl, kind) in program
        .inputs
        .iter()
        .map(|d| (d, ParamKind::Input))
        .chain(program.outputs.iter().map(|d| (d, ParamKind::Output)))
    {
        let id = ident(&decl.name);
        if !seen.insert(id.clone()) || id == "rows" || id == "n" {
            return Err(CodegenError::Unsupported(format!(
                "buffer name '{}' collides with another kernel parameter",
                decl.name
            )));
        }
        let c_type = match (decl.kind, kind) {
            (BufferKind::RowIndex, _) => "const long long*".to_string(),
            (BufferKind::RowScalarF32, ParamKind::Input) => "const float*".to_string(),
            (BufferKind::RowScalarF32, _) => "float*".to_string(),
            (_, ParamKind::Input) => "const lf_store_t*".to_string(),
            _ => "lf_store_t*".to_string(),
        };
        // In place, the pair is one buffer: `__restrict__` on either would
        // let the compiler read the input through the read-only path or
        // move a load past a store to the same element.
        let aliased = plan
            .in_place_pair()
            .is_some_and(|(i, o)| decl.name == i || decl.name == o);
        let restrict = if aliased { "" } else { " __restrict__" };
        sig.push(format!("{c_type}{restrict} p_{id}"));
        params.push(Param {
            name: decl.name.clone(),
            kind,
            c_type,
        });
    }
    for (name, kind) in [("rows", ParamKind::Rows), ("n", ParamKind::N)] {
        sig.push(format!("int {name}"));
        params.push(Param {
            name: name.into(),
            kind,
            c_type: "int".into(),
        });
    }

    let reductions = a.reductions.len();
    let mut red_index = vec![None; program.body.len()];
    for (k, r) in a.reductions.iter().enumerate() {
        red_index[r.index()] = Some(k);
    }
    let (gathers, skipped) = find_gathers(program);
    let warp_floats = if tree.warps > 1 {
        reductions * g * tree.warps as usize
    } else {
        0
    };
    // Pushed: a slot per group of the cluster per reduction, then one
    // 8-byte mbarrier per reduction from an 8-byte boundary.
    let sets = if plan.persistent_clusters { 2 } else { 1 };
    let push = (cluster > 1 && plan.pushed_cluster_reduce).then(|| Push {
        slots: warp_floats,
        barriers: (warp_floats + sets * reductions * cluster * g).next_multiple_of(2),
        sets,
    });
    if plan.persistent_clusters
        && (push.is_none() || g != 1 || plan.residency != Residency::Registers)
    {
        return inconsistent(format!("persistent clusters in {}", plan.describe()));
    }
    let cluster_floats = match push {
        Some(push) => push.barriers - warp_floats + 2 * reductions * sets,
        None if cluster > 1 => reductions * g,
        None => 0,
    };
    let slot_bytes = 4 * (warp_floats + cluster_floats) as u32;
    if plan.pushed_cluster_reduce && (cluster < 2 || slot_bytes > plan.shared_bytes) {
        return inconsistent(format!("pushed reduction in {}", plan.describe()));
    }
    let stage = plan.column_stage;
    let prefetch = plan.row_prefetch;
    let shared_bytes = match (stage, prefetch) {
        (Some(stage), None) => stage.total_bytes() as u32,
        (None, Some(prefetch)) => prefetch.total_bytes(),
        (None, None) => match plan.shared_chunks {
            // The chunks sit after the reduction slots.
            Some(shared) if shared.offset_bytes < slot_bytes => {
                return inconsistent(format!(
                    "shared chunks at byte {} overlap {slot_bytes} bytes of reduction slots in {}",
                    shared.offset_bytes,
                    plan.describe()
                ))
            }
            Some(shared) => shared.total_bytes(),
            None => slot_bytes,
        },
        (Some(_), Some(_)) => {
            return inconsistent(format!(
                "staged columns and prefetched rows in {}",
                plan.describe()
            ))
        }
    };
    // An occupancy cap's share of shared memory (the plan padded it).
    let shared_bytes = match plan.occupancy_cap {
        Some(_) if shared_bytes > plan.shared_bytes => {
            return inconsistent(format!(
                "{shared_bytes} bytes of shared memory over the cap's {} in {}",
                plan.shared_bytes,
                plan.describe()
            ))
        }
        Some(_) => plan.shared_bytes,
        None => shared_bytes,
    };
    if stage.is_some_and(|stage| 4 * stage.offset_floats < slot_bytes) {
        return inconsistent(format!(
            "column stage over the slots in {}",
            plan.describe()
        ));
    }
    let registers = plan.residency == Residency::Registers;
    let full = layout.complete_packs(n);
    // Aligned packs guard their own chunks (`emit_aligned_chunks`).
    let partial = if layout.has_partial_pack(n) && !plan.aligned_packs {
        (n % layout.chunk_span()).min(v)
    } else {
        0
    };
    let aligned_chunks = if plan.aligned_packs {
        layout.chunks(n + v - 1)
    } else {
        0
    };
    // Aligned packs start on pack boundaries whatever N.
    let vector = vector_access(plan.dtype(), v, if plan.aligned_packs { v } else { n })
        .map(|(words, per_access)| Vector { words, per_access });
    if stage.is_some() && (cluster < 2 || g > 1 || !registers || partial > 0 || vector.is_none()) {
        return inconsistent(format!("staged columns in {}", plan.describe()));
    }
    if plan.packed_resident && (!registers || vector.is_none() || plan.dtype().size_bytes() != 2) {
        return inconsistent(format!("packed resident tiles in {}", plan.describe()));
    }
    if plan.rounded_resident && !registers {
        return inconsistent(format!("a resident rounded tile in {}", plan.describe()));
    }
    if plan.computed_resident && !registers {
        return inconsistent(format!("a resident computed tile in {}", plan.describe()));
    }
    // The prefetched row: the one row input, read from memory in one phase
    // (the phase whose loads read the buffer).
    let (prefetched, prefetch_phase) = match prefetch {
        None => (None, None),
        Some(prefetch) => {
            let mut rows_in = program.row_inputs();
            let (Some(input), None) = (rows_in.next(), rows_in.next()) else {
                return inconsistent(format!(
                    "prefetched rows of several inputs in {}",
                    plan.describe()
                ));
            };
            let loads: Vec<usize> = program
                .body
                .iter()
                .enumerate()
                .filter(|(_, i)| matches!(i, Instr::Load { buffer } if *buffer == input.name))
                .map(|(at, _)| at)
                .collect();
            let read_once = loads
                .iter()
                .all(|&at| a.demanded[at].len() == 1 || a.resident.contains(&Value(at as u32)));
            // A cluster group's share: whole chunks, one copy each.
            let whole_chunks = n.is_multiple_of(layout.chunk_span());
            if !registers
                || (cluster > 1 && !(plan.persistent_clusters && whole_chunks))
                || g > 1
                || partial > 0
                || vector.is_none()
                || !read_once
                || prefetch.buffer_offset < slot_bytes
                || !prefetch.buffer_offset.is_multiple_of(16)
                || prefetch.row_bytes as usize != n / cluster * plan.dtype().size_bytes()
                || !prefetch.row_bytes.is_multiple_of(16)
                || prefetch.launched_groups == 0
                || !prefetch.launched_groups.is_multiple_of(cluster as u32)
            {
                return inconsistent(format!("prefetched rows in {}", plan.describe()));
            }
            let phase = loads
                .iter()
                .filter_map(|&at| a.demanded[at].first().copied())
                .max();
            (Some(input.name.clone()), phase)
        }
    };
    let name = kernel_name(plan);
    let mut cx = Ctx {
        plan,
        program,
        kinds: &a.kinds,
        phase: &a.phase,
        demanded: &a.demanded,
        dtype: plan.dtype(),
        v,
        g,
        lanes: tree.lanes as usize,
        warps: tree.warps as usize,
        cluster,
        full,
        partial,
        aligned_chunks,
        vector,
        registers,
        push,
        cluster_waited: false,
        resident: a.resident.clone(),
        red_index,
        gathers,
        skipped,
        reductions,
        prefetched: prefetched.clone(),
        prefetch_phase,
        preloaded: vec![],
        hidden_scalars: BTreeSet::new(),
        cold_call: None,
        again: None,
        out: String::new(),
        indent: 0,
    };

    let mut head = String::new();
    let _ = writeln!(
        head,
        "// lanefold kernel '{name}' (generated by lanefold-codegen; do not edit)\n\
         // program {} over {rows}x{n} {}, {}, order {:?}, fma {}\n\
         // tree: {} lanes x {} warps x {} groups; {threads} threads per group, {} groups",
        program.name,
        plan.dtype(),
        // A plain norm's text as before the cold path became the default,
        // so kernels recorded then regenerate byte for byte.
        plan.describe().replace(" no-cold-path", ""),
        plan.order,
        if options.fma { "on" } else { "off" },
        tree.lanes,
        tree.warps,
        tree.groups,
        plan.groups,
    );
    head.push_str(storage_helpers(plan.dtype()));
    if plan.packed_resident {
        head.push_str(rewiden_helper(plan.dtype()));
    }
    head.push_str(MATH_HELPERS);

    if plan.streaming_hints {
        head.push_str(&streaming_helpers(plan));
    } else if plan.aligned_packs && program.outputs.iter().any(|b| b.kind == BufferKind::Row) {
        head.push_str(VECTOR_STORES);
    }
    if keeps_columns(plan) {
        head.push_str(&reread_helpers(plan));
    }
    if plan.l1_columns {
        head.push_str(&l1_column_helpers(plan));
    }
    if plan.ordered_columns {
        head.push_str(&ordered_column_helpers(plan));
    }
    if cluster > 1 {
        head.push_str(CLUSTER_HELPERS);
        if exits_relaxed(plan) {
            head.push_str(CLUSTER_EXIT_HELPER);
        }
    }
    let pushed = push.is_some();
    let shared_chunks = plan.shared_chunks;
    if stage.is_some() || pushed || prefetch.is_some() || shared_chunks.is_some() {
        head.push_str(SHARED_ADDR_HELPER);
    }
    if let Some(prefetch) = prefetch {
        // A cluster group copies `threads x V` elements of each chunk.
        let (copies, copy_elems, copy_stride) = if cluster > 1 {
            (n / layout.chunk_span(), threads * v, layout.chunk_span())
        } else {
            (1, n, n)
        };
        let _ = writeln!(
            head,
            "#define LF_ROW_BYTES {}\n#define LF_COPIES {copies}\n#define LF_COPY_ELEMS {copy_elems}\n#define LF_COPY_STRIDE {copy_stride}",
            prefetch.row_bytes
        );
        head.push_str(PREFETCH_HELPERS);
    }
    if stage.is_some() || shared_chunks.is_some() {
        head.push_str(STAGE_HELPERS);
    }
    if pushed {
        head.push_str(PUSH_HELPERS);
    }
    if plan.persistent_clusters {
        head.push_str(PERSISTENT_PUSH_HELPERS);
    }
    if plan.l2_prefetch_rows > 0 {
        let _ = writeln!(
            head,
            "#define LF_L2_AHEAD {}\n#define LF_L2_SHARE {}",
            plan.l2_prefetch_rows,
            layout.group_chunk_span(plan.groups_per_row)
        );
        head.push_str(L2_PREFETCH_HELPER);
    }
    let _ = write!(
        head,
        "#define LF_N {n}\n#define LF_W {w}\n#define LF_V {v}\n#define LF_FULL {full}\n"
    );
    if stage.is_some() || shared_chunks.is_some() {
        let _ = writeln!(head, "#define LF_T {threads}");
    }
    if let Some(Instr::Rescaled { stat, residual, .. }) = program
        .body
        .iter()
        .find(|i| matches!(i, Instr::Rescaled { .. }))
    {
        head.push_str(&cold_helpers(
            program,
            *stat,
            residual.is_some(),
            plan.aligned_packs,
        ));
    }
    if let Some(shared) = shared_chunks {
        let _ = writeln!(
            head,
            "#define LF_SH0 {} // the first chunk held in shared memory",
            full - shared.chunks as usize
        );
    }
    cx.out = head;

    let bounds = match plan.min_groups_per_multiprocessor {
        Some(groups) => format!("{threads}, {groups}"),
        None => threads.to_string(),
    };
    let _ = writeln!(
        cx.out,
        "extern \"C\" __global__ void __launch_bounds__({bounds}) {name}(\n    {})\n{{",
        sig.join(",\n    ")
    );
    cx.indent = 1;
    cx.line("if (n != LF_N) __trap(); // the kernel is specialised for its row length");
    if shared_bytes > 0 {
        cx.line("extern __shared__ float lf_smem[];");
    }
    cx.line("const int tid = threadIdx.x;");
    cx.line("const int lane = tid & 31;");
    cx.line("(void)lane;");
    if cluster > 1 {
        cx.line(&format!(
            "const int rank = blockIdx.x % {cluster}; // this group's rank in the row's cluster"
        ));
        if plan.persistent_clusters {
            // `row` is the loop's: this cluster's rows, every `lf_clusters`-th.
            cx.line(&format!("const int lf_cluster = blockIdx.x / {cluster};"));
            cx.line(&format!("const int lf_clusters = gridDim.x / {cluster};"));
            cx.line(&format!("const int w = rank * {threads} + tid;"));
            cx.line("const int row_in_group = 0;");
        } else if g == 1 {
            cx.line(&format!("const int row = blockIdx.x / {cluster};"));
            cx.line(&format!("const int w = rank * {threads} + tid;"));
            cx.line("const int row_in_group = 0;");
            cx.again = Some((
                format!("lf_ctaid_again() % {cluster} * {threads} + lf_tid_again()"),
                format!("lf_ctaid_again() / {cluster}"),
            ));
        } else {
            // G rows per cluster: each group holds the same slice of each.
            let per_row = plan.row_threads_per_group();
            cx.line(&format!(
                "const int row_in_group = tid >> {};",
                per_row.ilog2()
            ));
            cx.line(&format!(
                "const int row = blockIdx.x / {cluster} * {g} + row_in_group;"
            ));
            // Opaque to the compiler: known disjoint bits let it merge the
            // worker's and each pack's offsets by OR and address every
            // pack separately (119 instead of 78 registers, softmax f32).
            cx.line(&format!(
                "int w = rank * {per_row} + (tid & {});",
                per_row - 1
            ));
            cx.line(HIDE_WORKER_INDEX);
            cx.again = Some((
                format!(
                    "lf_ctaid_again() % {cluster} * {per_row} + (lf_tid_again() & {})",
                    per_row - 1
                ),
                format!(
                    "lf_ctaid_again() / {cluster} * {g} + (lf_tid_again() >> {})",
                    per_row.ilog2()
                ),
            ));
        }
        if let (Some(stage), Some(vec)) = (stage, vector) {
            cx.emit_column_stage(&stage, vec);
        }
    } else if let (Some(prefetch), Some(input)) = (prefetch, &prefetched) {
        cx.line("const int w = tid;");
        cx.line("const int row_in_group = 0;");
        cx.emit_prefetch_setup(prefetch, input, "(int)blockIdx.x");
        cx.line("unsigned lf_parity = 0;");
    } else {
        if plan.folded_pack_addresses {
            cx.line("int w = tid % LF_W;");
            cx.line(HIDE_WORKER_INDEX);
        } else {
            cx.line("const int w = tid % LF_W;");
        }
        cx.line("const int row_in_group = tid / LF_W;");
        cx.line(&format!("const int row = blockIdx.x * {g} + row_in_group;"));
        cx.again = Some(if g == 1 {
            // One row per group: the worker is the thread.
            ("lf_tid_again()".to_string(), "lf_ctaid_again()".to_string())
        } else {
            (
                "lf_tid_again() % LF_W".to_string(),
                format!("lf_ctaid_again() * {g} + lf_tid_again() / LF_W"),
            )
        });
    }
    cx.line("(void)row_in_group;");
    let persistent = plan.persistent_clusters;
    if persistent {
        // Slots, barriers and resident tiles are set up once, outside the
        // loop over rows; the first push waits for no barrier in the loop.
        cx.emit_resident_declarations();
        if let (Some(prefetch), Some(input)) = (prefetch, &prefetched) {
            cx.emit_prefetch_setup(prefetch, input, "lf_cluster");
        }
        cx.emit_push_init();
        cx.line("asm volatile(\"barrier.cluster.wait.aligned;\" ::: \"memory\"); // every group's mbarriers are ready");
        cx.cluster_waited = true;
        cx.line("unsigned lf_it = 0; // rows this group has done");
        cx.open(
            "for (int row = lf_cluster; row < rows; row += lf_clusters) { // a persistent cluster",
        );
        cx.line("const bool row_ok = true;");
        cx.line("const int row_c = row;");
        cx.line("const unsigned lf_set = lf_it & 1u; // this row's slots and barriers");
        cx.line("const unsigned lf_parity = (lf_it >> 1) & 1u; // their phase");
        if prefetch.is_some() {
            cx.line("lf_prefetch_wait(lf_rowbar, lf_it & 1u); // this row's share is in lf_rowbuf");
        }
    } else if prefetch.is_some() {
        // Resident tiles are declared once, outside the loop over rows.
        cx.emit_resident_declarations();
        cx.open("for (int row = blockIdx.x; row < rows; row += gridDim.x) { // a persistent group");
        cx.line("const bool row_ok = true;");
        cx.line("const int row_c = row;");
        cx.line("(void)row_c;");
        cx.line("lf_prefetch_wait(lf_rowbar, lf_parity); // this row is in lf_rowbuf");
        cx.line("lf_parity ^= 1u;");
    } else if plan.unguarded_stores {
        // The whole group leaves, so no barrier waits on it.
        cx.line("if (row >= rows) return; // one row a group: nothing to store");
        cx.line("const bool row_ok = true;");
        cx.line("const int row_c = row;");
    } else {
        cx.line("const bool row_ok = row < rows; // rows past the end compute on the last row, store nothing");
        cx.line("const int row_c = row_ok ? row : rows - 1;");
    }
    cx.line("const size_t row_off = (size_t)row_c * LF_N;");
    cx.line("(void)row_off;");
    if plan.aligned_packs {
        cx.line(&format!(
            "const int lf_s = {}; // masked elements before the row's first aligned pack",
            row_shift("row_off")
        ));
    }
    if keeps_columns(plan) {
        cx.line("const unsigned long long lf_keep = lf_policy_keep();");
        cx.line("const unsigned long long lf_drop = lf_policy_drop();");
        cx.line("(void)lf_keep;");
        cx.line("(void)lf_drop;");
    }
    if cx.lanes > 1 {
        if cx.lanes == 32 {
            cx.line("const unsigned lf_mask = 0xffffffffu;");
        } else {
            cx.line(&format!(
                "const unsigned lf_mask = 0x{:x}u << (lane & ~{}); // this row's {} lanes",
                (1u64 << cx.lanes) - 1,
                cx.lanes - 1,
                cx.lanes
            ));
        }
    }
    if prefetch.is_none() && !persistent {
        cx.emit_resident_declarations();
        cx.emit_push_init();
        if let (Some(shared), Some(vec)) = (plan.shared_chunks, vector) {
            cx.emit_shared_chunk_copies(shared.offset_bytes, vec);
        }
    }
    for p in 0..a.num_phases {
        cx.emit_phase(p);
    }
    if let Some(lines) = cx.cold_call.take() {
        for l in lines {
            cx.line(&l);
        }
    }
    if prefetch.is_some() || persistent {
        cx.line("__syncthreads(); // the reduction slots are reused by the next row");
        if persistent {
            cx.line("++lf_it;");
        }
        cx.close();
    }
    if cluster > 1 {
        if exits_relaxed(plan) {
            cx.line("lf_cluster_exit(); // no group leaves while another may still read its slots");
        } else {
            cx.line("lf_cluster_sync(); // no group leaves while another may still read its slots");
        }
    }
    cx.indent = 0;
    cx.line("}");

    Ok(Kernel {
        name,
        source: cx.out,
        grid: (
            prefetch.map_or(plan.groups as u32, |prefetch| prefetch.launched_groups),
            1,
            1,
        ),
        block: (threads as u32, 1, 1),
        cluster: (cluster > 1).then_some(cluster as u32),
        shared_bytes,
        params,
        persistent_rows: (prefetch.is_some() || plan.persistent_clusters).then_some(rows as u32),
        carveout_percent: match plan.occupancy_cap {
            Some(cap) => Some(cap.carveout_percent),
            // Shared chunks are there so more groups fit: the most shared memory.
            None if plan.shared_chunks.is_some() => Some(100),
            None => plan.l1_columns.then_some(0),
        },
    })
}
