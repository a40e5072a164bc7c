//! The differential fuzzer's case generator, shared by the CPU proptest
//! and `lanefold selftest --fuzz`: from a seed and a case index it draws an
//! operator, a dtype, a shape, a legal plan on the given target and values
//! that reach the numerical corners (huge, tiny and subnormal rows,
//! constant rows, mixed signs, infinities, NaN, -inf masks, ignored
//! targets); a norm's plan without the cold path leaves out the known
//! limits of [`FAST_PATH_EXCLUSIONS`]. [`check`] judges any backend's
//! outputs against the independent float64 [`crate::oracle`].

use crate::data::{expected_len, Buffers, Tensor};
use crate::validate::{validate, Validation};
use lanefold_ir::{BufferKind, DType, Operator, OperatorOptions, IGNORE_INDEX};
use lanefold_plan::{plan, LayoutRequest, Plan, Problem, ResidencyRequest, Shape, Target};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// How large a case may be.
#[derive(Clone, Copy, Debug)]
pub struct FuzzLimits {
    /// Elements per row input (rows x N) at most; rows are cut to fit.
    pub max_elements: usize,
}

impl Default for FuzzLimits {
    fn default() -> Self {
        FuzzLimits {
            max_elements: 1 << 16,
        }
    }
}

/// One drawn case: a planned problem and its inputs.
#[derive(Clone, Debug)]
pub struct FuzzCase {
    pub plan: Plan,
    pub inputs: Buffers,
    /// Which values each row drew, for a failure's report.
    pub rows: Vec<RowKind>,
}

impl FuzzCase {
    /// A one-line description: operator, dtype, shape, plan, row kinds.
    pub fn label(&self) -> String {
        let p = &self.plan.problem;
        let mut kinds: Vec<&str> = self.rows.iter().map(|k| k.name()).collect();
        kinds.sort_unstable();
        kinds.dedup();
        format!(
            "{} {} {} [{}] rows: {}",
            p.operator_kind().map_or("?", |o| o.name()),
            p.dtype,
            p.shape,
            self.plan.describe(),
            kinds.join(",")
        )
    }
}

/// The kind of values a row holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowKind {
    /// Uniform in [-2, 2).
    Normal,
    /// Normal values offset by a constant many spreads away.
    Offset,
    /// Mixed signs, magnitudes 1e19 up to near the storage maximum.
    Huge,
    /// Magnitudes just above the smallest normal of the storage type.
    Tiny,
    /// Subnormals of the storage type.
    Subnormal,
    /// One value repeated.
    Constant,
    /// Normal values with a few huge and tiny ones.
    Mixed,
    /// Normal values, some -inf (an attention mask).
    Masked,
    /// Every value -inf.
    FullyMasked,
    /// Normal values with a +inf, a -inf or a NaN.
    NonFinite,
}

impl RowKind {
    const ALL: [RowKind; 10] = [
        RowKind::Normal,
        RowKind::Offset,
        RowKind::Huge,
        RowKind::Tiny,
        RowKind::Subnormal,
        RowKind::Constant,
        RowKind::Mixed,
        RowKind::Masked,
        RowKind::FullyMasked,
        RowKind::NonFinite,
    ];

    pub fn name(self) -> &'static str {
        match self {
            RowKind::Normal => "normal",
            RowKind::Offset => "offset",
            RowKind::Huge => "huge",
            RowKind::Tiny => "tiny",
            RowKind::Subnormal => "subnormal",
            RowKind::Constant => "constant",
            RowKind::Mixed => "mixed",
            RowKind::Masked => "masked",
            RowKind::FullyMasked => "fully-masked",
            RowKind::NonFinite => "non-finite",
        }
    }
}

/// A combination the generator does not draw for a norm without the cold
/// path: a known limit of its fast statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormLimit {
    /// rmsnorm rows of this kind.
    RmsRows(RowKind),
    /// layernorm and residual_layernorm rows of this kind, on any plan.
    Rows(RowKind),
    /// Rows of this kind on a plan with one-pass moments.
    OnePassRows(RowKind),
    /// Any plan with the fused output.
    FusedOutput,
}

/// The known limits of the norms' fast statistics, which the generator
/// leaves out on plans without the cold path (`no-cold-path`; the
/// default carries it), each with its reason. A plan with it has none: every row kind
/// is drawn (the `regression_` tests of the CPU executor pin them).
pub const FAST_PATH_EXCLUSIONS: &[(NormLimit, &str)] = &[
    (
        NormLimit::RmsRows(RowKind::Huge),
        "rmsnorm: rows whose sum of squares overflows f32 normalise to 0",
    ),
    (
        NormLimit::RmsRows(RowKind::Mixed),
        "rmsnorm: mixed rows carry huge values whose squares overflow f32",
    ),
    (
        NormLimit::Rows(RowKind::Constant),
        "layernorm: constant rows lose the bias to the mean's rounding; fixed on branch numerics at a measured cost",
    ),
    (
        NormLimit::Rows(RowKind::Offset),
        "layernorm: rows offset far from 0 lose their centring to the mean's rounding; fixed on branch numerics at a measured cost",
    ),
    (
        NormLimit::Rows(RowKind::Huge),
        "layernorm: rows whose sum of squares overflows f32 normalise to 0 ; fixed on branch numerics at a measured cost",
    ),
    (
        NormLimit::Rows(RowKind::Mixed),
        "layernorm: mixed rows carry huge values whose squares overflow f32; fixed on branch numerics at a measured cost",
    ),
    (
        NormLimit::OnePassRows(RowKind::Masked),
        "layernorm: one-pass moments clamp a NaN variance to 0, so a row with -inf gives infinities where torch gives NaN; fixed on branch numerics at a measured cost",
    ),
    (
        NormLimit::OnePassRows(RowKind::NonFinite),
        "layernorm: one-pass moments clamp a NaN variance to 0, so a row with an infinity gives infinities where torch gives NaN; fixed on branch numerics at a measured cost",
    ),
    (
        NormLimit::FusedOutput,
        "layernorm: the fused output h * rstd - mean * rstd cancels on rows far from 0 and overflows on huge ones; fixed on branch numerics at a measured cost",
    ),
];

/// Is `limit` in [`FAST_PATH_EXCLUSIONS`]?
fn excluded(limit: NormLimit) -> bool {
    FAST_PATH_EXCLUSIONS.iter().any(|(l, _)| *l == limit)
}

/// The row kinds drawn for `op` on `plan`: every kind, less the
/// [`FAST_PATH_EXCLUSIONS`] for a norm without the cold path.
pub fn row_kinds(op: Operator, plan: &Plan) -> Vec<RowKind> {
    let layernorm = matches!(op, Operator::Layernorm | Operator::ResidualLayernorm);
    let limited = |k| {
        if plan.cold_path() {
            return false;
        }
        match op {
            Operator::Rmsnorm => excluded(NormLimit::RmsRows(k)),
            _ if layernorm => {
                excluded(NormLimit::Rows(k))
                    || (plan.one_pass_moments() && excluded(NormLimit::OnePassRows(k)))
            }
            _ => false,
        }
    };
    RowKind::ALL.into_iter().filter(|&k| !limited(k)).collect()
}

/// log10 of the storage type's largest finite and smallest normal values.
fn decades(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F32 | DType::Bf16 => (38.5, -37.9),
        DType::F16 => (4.8, -4.2),
    }
}

/// A magnitude 10^e for e uniform in [lo, hi), with a random sign.
fn signed_decade(rng: &mut ChaCha8Rng, lo: f64, hi: f64) -> f32 {
    let v = 10f64.powf(rng.random_range(lo..hi)) as f32;
    if rng.random_bool(0.5) {
        -v
    } else {
        v
    }
}

fn row_values(
    rng: &mut ChaCha8Rng,
    kind: RowKind,
    op: Operator,
    dtype: DType,
    n: usize,
) -> Vec<f32> {
    let (top, bottom) = decades(dtype);
    // A sum's running total must stay finite where its value is: its huge
    // rows stop at 1e30 (n x 1e30 fits f32); other operators' rows reach
    // the top of the range.
    let huge_top = if op == Operator::Sum {
        top.min(30.0)
    } else {
        top - 0.1
    };
    let huge_bottom = if dtype == DType::F16 { 3.0 } else { 19.0 };
    let normal = |rng: &mut ChaCha8Rng| rng.random_range(-2.0f32..2.0);
    match kind {
        RowKind::Normal => (0..n).map(|_| normal(rng)).collect(),
        RowKind::Offset => {
            let off = if dtype == DType::F16 { 50.0 } else { 300.0 };
            let off = if rng.random_bool(0.5) { off } else { -off };
            (0..n).map(|_| off + normal(rng)).collect()
        }
        RowKind::Huge => {
            let lo = rng.random_range(huge_bottom..huge_top);
            (0..n).map(|_| signed_decade(rng, lo, huge_top)).collect()
        }
        RowKind::Tiny => (0..n)
            .map(|_| signed_decade(rng, bottom, bottom + 2.0))
            .collect(),
        RowKind::Subnormal => {
            let (lo, hi) = match dtype {
                DType::F32 => (-44.8, -38.0),
                DType::Bf16 => (-40.0, -38.0),
                DType::F16 => (-7.2, -4.9),
            };
            (0..n).map(|_| signed_decade(rng, lo, hi)).collect()
        }
        RowKind::Constant => {
            let v = match rng.random_range(0..3) {
                0 => normal(rng),
                1 => signed_decade(rng, -3.0, 3.0),
                _ => rng.random_range(-8i32..8) as f32,
            };
            vec![v; n]
        }
        RowKind::Mixed => (0..n)
            .map(|_| match rng.random_range(0..16) {
                0 => signed_decade(rng, huge_bottom, huge_top),
                1 => signed_decade(rng, bottom, bottom + 2.0),
                _ => normal(rng),
            })
            .collect(),
        RowKind::Masked => {
            let p = rng.random_range(0.05..0.95);
            (0..n)
                .map(|_| {
                    if rng.random_bool(p) {
                        f32::NEG_INFINITY
                    } else {
                        normal(rng)
                    }
                })
                .collect()
        }
        RowKind::FullyMasked => vec![f32::NEG_INFINITY; n],
        RowKind::NonFinite => {
            let mut v: Vec<f32> = (0..n).map(|_| normal(rng)).collect();
            for _ in 0..rng.random_range(1..=3) {
                let at = rng.random_range(0..n);
                v[at] = match rng.random_range(0..3) {
                    0 => f32::INFINITY,
                    1 => f32::NEG_INFINITY,
                    _ => f32::NAN,
                };
            }
            v
        }
    }
}

/// A row length: often short, odd or prime, sometimes long.
fn draw_n(rng: &mut ChaCha8Rng, max_elements: usize) -> usize {
    const PRIMES: [usize; 12] = [1, 2, 3, 7, 31, 127, 257, 1021, 4093, 8191, 40009, 65521];
    let cap = max_elements.clamp(1, 70_000);
    let n = match rng.random_range(0..4) {
        0 => PRIMES[rng.random_range(0..PRIMES.len())],
        1 => 1 << rng.random_range(0..17),
        2 => rng.random_range(1..=cap),
        _ => (10f64.powf(rng.random_range(0.0..(cap as f64).log10())) as usize).max(1),
    };
    n.min(cap)
}

/// A layout request over the mapper's choices; plain or automatic more
/// often than exotic, so the common plans are well covered.
fn draw_request(rng: &mut ChaCha8Rng) -> LayoutRequest {
    let pick = |rng: &mut ChaCha8Rng, xs: &[u32]| xs[rng.random_range(0..xs.len())];
    let mut r = LayoutRequest {
        workers: pick(rng, &[0, 0, 1, 32, 64, 128, 256, 512, 1024, 2048]),
        pack: pick(rng, &[0, 1, 2, 4, 8]),
        unroll: pick(rng, &[0, 1, 1, 2, 4]),
        rows_per_group: pick(rng, &[0, 0, 1, 2]),
        residency: [
            ResidencyRequest::Auto,
            ResidencyRequest::Registers,
            ResidencyRequest::Stream,
        ][rng.random_range(0..3)],
        ..Default::default()
    };
    r.online_normalizer = rng.random_bool(0.4);
    r.one_pass_moments = rng.random_bool(0.4);
    r.fused_output = rng.random_bool(0.3);
    r.pack_resident = rng.random_bool(0.2);
    r.rounded_resident = rng.random_bool(0.2);
    r.computed_resident = rng.random_bool(0.2);
    r.no_cold_path = rng.random_bool(0.5);
    r
}

/// Case `index` of the stream `seed`, planned on `target`. A request the
/// mapper refuses is replaced by the automatic one.
pub fn draw(seed: u64, index: u64, target: &Target, limits: FuzzLimits) -> FuzzCase {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut op = Operator::SIX[rng.random_range(0..Operator::SIX.len())];
    if op == Operator::CrossEntropy {
        // A third of cross entropy's cases each write the saved lse or
        // read it back, decided on a stream of their own so the other
        // operators' cases stay as they were drawn before.
        let mut pick = ChaCha8Rng::seed_from_u64(seed ^ index.wrapping_mul(0xD1B5_4A32_D192_ED03));
        op = [
            Operator::CrossEntropy,
            Operator::CrossEntropyWithLse,
            Operator::CrossEntropyBackward,
        ][pick.random_range(0..3)];
    }
    let dtype = DType::ALL[rng.random_range(0..DType::ALL.len())];
    let options = OperatorOptions {
        weight: rng.random_bool(0.8),
        bias: rng.random_bool(0.8),
    };
    let n = draw_n(&mut rng, limits.max_elements);
    let rows = rng
        .random_range(1..=300usize)
        .min((limits.max_elements / n).max(1));
    let shape = Shape::new(rows, n).expect("a drawn shape is valid");
    let problem = Problem::operator(op, options, dtype, shape);
    let mut request = draw_request(&mut rng);
    // Aligned packs on a stream of their own, so the other draws stay as
    // they were.
    request.aligned_packs =
        ChaCha8Rng::seed_from_u64(seed ^ index.wrapping_mul(0x94D0_49BB_1331_11EB))
            .random_bool(0.5);
    // So do the store guard and the derived tiles (same bits; the CUDA
    // fuzz reaches their kernels).
    let mut variants = ChaCha8Rng::seed_from_u64(seed ^ index.wrapping_mul(0xBF58_476D_1CE4_E5B9));
    request.unguarded_stores = variants.random_bool(0.3);
    request.recompute_derived = variants.random_bool(0.3);
    if matches!(op, Operator::Layernorm | Operator::ResidualLayernorm)
        && request.no_cold_path
        && excluded(NormLimit::FusedOutput)
    {
        request.fused_output = false;
    }
    let plan = plan(&problem, target, &request)
        .or_else(|_| plan(&problem, target, &LayoutRequest::default()))
        .expect("the automatic request plans every operator");
    // One kind for the whole case or one per row.
    let allowed = row_kinds(op, &plan);
    let single = rng
        .random_bool(0.5)
        .then(|| allowed[rng.random_range(0..allowed.len())]);
    let kinds: Vec<RowKind> = (0..rows)
        .map(|_| single.unwrap_or_else(|| allowed[rng.random_range(0..allowed.len())]))
        .collect();
    let mut inputs = Buffers::new();
    for decl in &problem.program.inputs {
        let len = expected_len(decl.kind, rows, n);
        let tensor = match decl.kind {
            BufferKind::RowIndex => Tensor::I64(
                (0..rows)
                    .map(|_| {
                        if rng.random_range(0..6) == 0 {
                            IGNORE_INDEX
                        } else {
                            rng.random_range(0..n as i64)
                        }
                    })
                    .collect(),
            ),
            BufferKind::Column => {
                let v: Vec<f32> = (0..len).map(|_| rng.random_range(-1.5f32..1.5)).collect();
                Tensor::from_f32(dtype, &v)
            }
            // An incoming loss gradient: a mean's 1/rows or any scale.
            BufferKind::RowScalar => {
                let v: Vec<f32> = (0..len)
                    .map(|_| signed_decade(&mut rng, -6.0, 2.0))
                    .collect();
                Tensor::from_f32(dtype, &v)
            }
            // The saved statistic is the forward's of x, set below.
            BufferKind::RowScalarF32 => Tensor::F32(vec![0.0; len]),
            _ => {
                let mut v = Vec::with_capacity(len);
                for &kind in &kinds {
                    v.extend(row_values(&mut rng, kind, op, dtype, n));
                }
                Tensor::from_f32(dtype, &v)
            }
        };
        inputs.insert(decl.name.clone(), tensor);
    }
    if let Some(lse) = crate::data::saved_lse(&problem, &inputs) {
        inputs.insert("lse".into(), lse);
    }
    FuzzCase {
        plan,
        inputs,
        rows: kinds,
    }
}

/// Judge `outputs` of `case` against the float64 oracle. Each output is
/// held to the dtype's tolerance or, where looser, to the worst-case bound
/// of the plan's own summation order: each worker's running sum over
/// `ceil(N / W)` elements, then `log2 W` tree levels, each addition
/// rounding by up to 2^-24 (a W=1 plan over 69k elements is ~1e-5 off in
/// f32, as any sequential f32 sum of that length can be; torch's trees
/// are shallower).
pub fn check(case: &FuzzCase, outputs: &Buffers) -> Validation {
    let problem = &case.plan.problem;
    let want = crate::oracle::expected(problem, &case.inputs).expect("an operator program");
    let mut v = validate(problem.dtype, outputs, &want);
    let w = case.plan.layout.workers.max(1) as f64;
    let chain = (problem.shape.n as f64 / w).ceil() + w.log2().ceil();
    let bound = chain * 2f64.powi(-24);
    for o in &mut v.outputs {
        if bound > o.tolerance && o.nonfinite == 0 && o.rel_err <= bound {
            o.tolerance = bound;
            o.pass = o.elements == want[&o.name].values.len();
        }
    }
    v.pass = !v.outputs.is_empty() && v.outputs.iter().all(|o| o.pass);
    v
}

/// Judge `outputs` that a backend gave for `case` by running `resolved`,
/// the plan it ran: the CUDA runtime runs a norm's plain kernel (no cold
/// path) where the cold one would not keep its occupancy. Rows of a kind
/// that `resolved` leaves to the fast path's known limits
/// ([`FAST_PATH_EXCLUSIONS`]) are not held to float64 (the plain kernel's
/// answer there is torch's: 0 or the bias on overflow); every other row
/// is, as in [`check`]. Returns the judgement and the rows left out; a case
/// whose rows are all left out holds nothing and passes.
pub fn check_resolved(case: &FuzzCase, resolved: &Plan, outputs: &Buffers) -> (Validation, usize) {
    let problem = &case.plan.problem;
    let Some(op) = problem.operator_kind() else {
        return (check(case, outputs), 0);
    };
    let allowed = row_kinds(op, resolved);
    let keep: Vec<usize> = (0..case.rows.len())
        .filter(|&r| allowed.contains(&case.rows[r]))
        .collect();
    let left_out = case.rows.len() - keep.len();
    let columns_out = problem
        .program
        .outputs
        .iter()
        .any(|d| d.kind == BufferKind::Column);
    if left_out == 0 || columns_out {
        return (check(case, outputs), 0);
    }
    if keep.is_empty() {
        let v = Validation {
            outputs: vec![],
            pass: true,
        };
        return (v, left_out);
    }
    let n = problem.shape.n;
    let sub = |buffers: &Buffers, decls: &[lanefold_ir::BufferDecl]| -> Buffers {
        let mut out = Buffers::new();
        for d in decls {
            let Some(t) = buffers.get(&d.name) else {
                continue;
            };
            let t = match d.kind {
                BufferKind::Row => t.select_rows(n, &keep),
                BufferKind::Column => t.clone(),
                BufferKind::RowIndex | BufferKind::RowScalar | BufferKind::RowScalarF32 => {
                    t.select_rows(1, &keep)
                }
            };
            out.insert(d.name.clone(), t);
        }
        out
    };
    let mut plan = case.plan.clone();
    plan.problem.shape = Shape::new(keep.len(), n).expect("fewer rows of a valid shape");
    let kept = FuzzCase {
        inputs: sub(&case.inputs, &problem.program.inputs),
        rows: keep.iter().map(|&r| case.rows[r]).collect(),
        plan,
    };
    let outputs = sub(outputs, &problem.program.outputs);
    (check(&kept, &outputs), left_out)
}

/// Run `case` on the CPU executor and judge it.
pub fn run_cpu(case: &FuzzCase) -> Result<Validation, crate::ExecError> {
    let mut outputs = crate::data::poisoned_outputs(&case.plan.problem);
    crate::execute(&case.plan, &case.inputs, &mut outputs)?;
    Ok(check(case, &outputs))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The saved-lse forms are drawn, with the lse their x gives, and
    /// a case the CPU executor passes fails with a wrong lse.
    #[test]
    fn the_saved_lse_forms_are_drawn_with_a_consistent_lse() {
        let target = Target::cpu();
        let limits = FuzzLimits { max_elements: 4096 };
        let mut seen = std::collections::BTreeSet::new();
        for index in 0..400 {
            let case = draw(7, index, &target, limits);
            let op = case.plan.problem.operator_kind().unwrap();
            seen.insert(op.name());
            if op != Operator::CrossEntropyBackward {
                continue;
            }
            let want = crate::data::saved_lse(&case.plan.problem, &case.inputs).unwrap();
            assert!(case.inputs["lse"].same_bits(&want));
            let finite = case.inputs["x"].to_f64().iter().all(|v| v.is_finite());
            if finite && case.plan.problem.shape.n > 1 && case.plan.problem.dtype == DType::F32 {
                assert!(run_cpu(&case).unwrap().pass, "{}", case.label());
                // The oracle's dx from the drawn lse is the true gradient:
                // the recomputing backward's reference on the same inputs.
                let p = &case.plan.problem;
                let recompute = Problem::operator(
                    Operator::CrossEntropyBackwardRecompute,
                    OperatorOptions::default(),
                    p.dtype,
                    p.shape,
                );
                let mut inputs = case.inputs.clone();
                inputs.remove("lse");
                let truth = crate::reference::reference(&recompute, &inputs).unwrap();
                let mut oracle = Buffers::new();
                let dx = &crate::oracle::expected(p, &case.inputs).unwrap()["dx"].values;
                let dx: Vec<f32> = dx.iter().map(|&v| v as f32).collect();
                oracle.insert("dx".into(), Tensor::F32(dx));
                let v = validate(DType::F32, &oracle, &truth);
                assert!(v.pass, "{}: {:?}", case.label(), v.outputs);
            }
        }
        for op in [
            "cross_entropy_with_lse",
            "cross_entropy_backward",
            "softmax",
        ] {
            assert!(seen.contains(op), "{op} never drawn: {seen:?}");
        }
    }

    /// A norm case run on its plain plan (the CUDA runtime's fallback):
    /// rows of the plain kernel's known limits are left out, the others
    /// are still held to float64, and a corrupted one fails.
    #[test]
    fn a_case_run_on_its_plain_plan_holds_only_the_rows_that_plan_promises() {
        let limits = FuzzLimits {
            max_elements: 1 << 12,
        };
        let mut judged = 0;
        for i in 0..3000 {
            let case = draw(11, i, &Target::cpu(), limits);
            let norm = case
                .plan
                .problem
                .operator_kind()
                .is_some_and(|op| op.has_cold_path());
            if !norm || !case.plan.cold_path() || case.plan.problem.shape.rows < 2 {
                continue;
            }
            let mut request = case.plan.schedule();
            request.no_cold_path = true;
            let plain = plan(&case.plan.problem, &Target::cpu(), &request).unwrap();
            let op = case.plan.problem.operator_kind().unwrap();
            let promised = row_kinds(op, &plain);
            let left_out = case.rows.iter().filter(|k| !promised.contains(k)).count();
            if left_out == 0 || left_out == case.rows.len() {
                continue;
            }
            let mut out = crate::data::poisoned_outputs(&plain.problem);
            crate::execute(&plain, &case.inputs, &mut out).unwrap();
            let (v, n) = check_resolved(&case, &plain, &out);
            assert_eq!(n, left_out, "{}", case.label());
            assert!(v.pass, "{}: {:?}", case.label(), v.outputs);
            // The default plan's own judgement leaves nothing out.
            let (_, none) = check_resolved(&case, &case.plan, &out);
            assert_eq!(none, 0);
            let r = (0..case.rows.len())
                .find(|&r| promised.contains(&case.rows[r]))
                .unwrap();
            let n = case.plan.problem.shape.n;
            let y = out.get_mut("y").unwrap();
            let mut v: Vec<f32> = (0..y.len()).map(|i| y.get(i)).collect();
            v[r * n] = if v[r * n].is_finite() { f32::NAN } else { 0.5 };
            *y = Tensor::from_f32(case.plan.problem.dtype, &v);
            let (v, _) = check_resolved(&case, &plain, &out);
            assert!(!v.pass, "{}: a corrupted row {r} passed", case.label());
            judged += 1;
            if judged == 8 {
                break;
            }
        }
        assert!(judged >= 5, "only {judged} cases had rows of both sorts");
    }

    /// Norm cases without the cold path draw none of
    /// [`FAST_PATH_EXCLUSIONS`]; with it, and for other operators, every
    /// row kind is drawn (and layernorm's fused output).
    #[test]
    fn norms_without_the_cold_path_leave_out_the_listed_limits_and_others_do_not() {
        let limits = FuzzLimits {
            max_elements: 1 << 10,
        };
        let mut others = std::collections::BTreeSet::new();
        let mut cold = std::collections::BTreeSet::new();
        let mut cold_fused = false;
        for i in 0..600 {
            let case = draw(5, i, &Target::cpu(), limits);
            let op = case.plan.problem.operator_kind().unwrap();
            let layernorm = matches!(op, Operator::Layernorm | Operator::ResidualLayernorm);
            if !layernorm && op != Operator::Rmsnorm {
                others.extend(case.rows.iter().map(|k| k.name()));
                continue;
            }
            if case.plan.cold_path() {
                cold.extend(case.rows.iter().map(|k| k.name()));
                cold_fused |= case.plan.fused_output();
                continue;
            }
            assert!(!case.plan.fused_output(), "{}", case.label());
            for &k in &case.rows {
                let limited = if layernorm {
                    excluded(NormLimit::Rows(k))
                        || (excluded(NormLimit::OnePassRows(k)) && case.plan.one_pass_moments())
                } else {
                    excluded(NormLimit::RmsRows(k))
                };
                assert!(!limited, "{}", case.label());
            }
        }
        assert_eq!(others.len(), RowKind::ALL.len());
        assert_eq!(cold.len(), RowKind::ALL.len());
        assert!(cold_fused);
    }

    /// The fuzz reaches the kernels of the scheduling variants that keep
    /// every bit: on the H200 some drawn plans carry each.
    #[test]
    fn drawn_h200_plans_carry_the_store_guard_and_derived_tile_variants() {
        let limits = FuzzLimits {
            max_elements: 1 << 12,
        };
        let plans: Vec<_> = (0..400)
            .map(|i| draw(3, i, &Target::h200(), limits).plan)
            .collect();
        let unguarded = plans.iter().filter(|p| p.unguarded_stores).count();
        let recomputed = plans.iter().filter(|p| p.recompute_derived).count();
        assert!(unguarded >= 20, "{unguarded} unguarded");
        assert!(recomputed >= 20, "{recomputed} recomputing");
    }
}
