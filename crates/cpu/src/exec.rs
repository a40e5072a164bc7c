//! The exact-order executor: runs any legal plan and reproduces its FP32
//! addition order (each worker's recurrence in chunk/element order, then the
//! butterfly tree over lanes, warps and cluster groups), so it is an oracle
//! for the GPU's reduction order as well as a CPU path.

use crate::data::{check_inputs, expected_len, Buffers, DataError, Tensor};
use lanefold_ir::{
    BinaryOp, BufferKind, Instr, ReduceOp, RowStat, UnaryOp, LAYERNORM_EPS, LN_CANCEL_BITS,
    RESCUE_SCALE,
};
use lanefold_plan::{Layout, Plan, TreeLevels};
use rayon::prelude::*;

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error(transparent)]
    Data(#[from] DataError),
    #[error("output '{name}' has {got} elements, expected {expected}")]
    OutputLength {
        name: String,
        got: usize,
        expected: usize,
    },
    #[error("the plan ({0}) does not write in place")]
    NotInPlace(String),
}

/// Where the executor reads its inputs, and (in place) which input takes
/// which output.
enum Source<'a> {
    Shared(&'a Buffers),
    InPlace {
        buffers: &'a mut Buffers,
        input: &'a str,
        output: &'a str,
    },
}

impl Source<'_> {
    fn buffers(&self) -> &Buffers {
        match self {
            Source::Shared(b) => b,
            Source::InPlace { buffers, .. } => buffers,
        }
    }
}

#[derive(Clone, Debug)]
enum Val {
    Tile(Vec<f32>),
    Scalar(f32),
    Index(i64),
    Effect,
}

impl Val {
    fn tile(&self) -> &[f32] {
        match self {
            Val::Tile(t) => t,
            _ => unreachable!("verified program: tile expected"),
        }
    }
    fn scalar(&self) -> f32 {
        match self {
            Val::Scalar(s) => *s,
            _ => unreachable!("verified program: scalar expected"),
        }
    }
    fn index(&self) -> i64 {
        match self {
            Val::Index(i) => *i,
            _ => unreachable!("verified program: index expected"),
        }
    }
}

fn unary(op: UnaryOp, x: f32) -> f32 {
    match op {
        UnaryOp::Neg => -x,
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Rsqrt => 1.0 / x.sqrt(),
        UnaryOp::Recip => 1.0 / x,
        UnaryOp::Square => x * x,
    }
}

fn binary(op: BinaryOp, a: f32, b: f32) -> f32 {
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Max => a.max(b),
    }
}

/// [`unary`] over a tile, one loop per operation: with the operation a
/// constant in each loop, no element pays the dispatch.
fn unary_tile(op: UnaryOp, t: &[f32]) -> Vec<f32> {
    #[inline(always)]
    fn each(op: UnaryOp, t: &[f32]) -> Vec<f32> {
        t.iter().map(|&x| unary(op, x)).collect()
    }
    match op {
        UnaryOp::Neg => each(UnaryOp::Neg, t),
        UnaryOp::Exp => each(UnaryOp::Exp, t),
        UnaryOp::Log => each(UnaryOp::Log, t),
        UnaryOp::Sqrt => each(UnaryOp::Sqrt, t),
        UnaryOp::Rsqrt => each(UnaryOp::Rsqrt, t),
        UnaryOp::Recip => each(UnaryOp::Recip, t),
        UnaryOp::Square => each(UnaryOp::Square, t),
    }
}

/// [`binary`] over two tiles, one loop per operation (see [`unary_tile`]).
fn binary_tile(op: BinaryOp, a: &[f32], b: &[f32]) -> Vec<f32> {
    #[inline(always)]
    fn each(op: BinaryOp, a: &[f32], b: &[f32]) -> Vec<f32> {
        a.iter().zip(b).map(|(&x, &y)| binary(op, x, y)).collect()
    }
    match op {
        BinaryOp::Add => each(BinaryOp::Add, a, b),
        BinaryOp::Sub => each(BinaryOp::Sub, a, b),
        BinaryOp::Mul => each(BinaryOp::Mul, a, b),
        BinaryOp::Div => each(BinaryOp::Div, a, b),
        BinaryOp::Max => each(BinaryOp::Max, a, b),
    }
}

fn butterfly<T: Copy>(vals: &mut [T], combine: &impl Fn(T, T) -> T) -> T {
    let mut off = vals.len() / 2;
    while off >= 1 {
        let prev = vals.to_vec();
        for (l, v) in vals.iter_mut().enumerate() {
            *v = combine(prev[l], prev[l ^ off]);
        }
        off /= 2;
    }
    vals[0]
}

/// Per-worker accumulators (worker order) combined through the plan's
/// tree: xor butterflies within each warp's lanes, then over the warps of
/// a group, then over the groups of a cluster.
fn tree_combine<T: Copy>(mut level: Vec<T>, tree: TreeLevels, combine: impl Fn(T, T) -> T) -> T {
    for width in [tree.lanes, tree.warps, tree.groups] {
        level = level
            .chunks_mut(width as usize)
            .map(|seg| butterfly(seg, &combine))
            .collect();
    }
    debug_assert_eq!(level.len(), 1);
    level[0]
}

/// Combine per-worker accumulators (worker order) through the plan's tree.
pub fn reduce_tree(workers: &[f32], op: ReduceOp, tree: TreeLevels) -> f32 {
    tree_combine(workers.to_vec(), tree, |a, b| op.combine(a, b))
}

/// Each worker's accumulator over the row: starting from `init`, `push`
/// takes its packs in chunk order, each pack's in-row elements in order
/// (a guarded head or tail pack is shorter, or empty). Element `i` is the
/// layout's logical element `i + shift` ([`Plan::row_shift`]).
fn worker_accumulators<T: Copy>(
    tile: &[f32],
    layout: &Layout,
    shift: usize,
    init: T,
    push: impl Fn(T, &[f32]) -> T,
) -> Vec<T> {
    let n = tile.len();
    let (w, v) = (layout.workers as usize, layout.pack as usize);
    let mut acc = vec![init; w];
    // V is at most 8 (the layout's legality), so a pack fits on the stack.
    assert!(v <= 8, "V={v}: a legal layout has V of 1, 2, 4 or 8");
    let mut pack = [0.0f32; 8];
    for chunk in 0..layout.chunks(n + shift) {
        for (worker, a) in acc.iter_mut().enumerate() {
            // A whole pack inside the row is a slice of it.
            let first = layout.logical(chunk, worker, 0);
            if first >= shift && first + v <= n + shift {
                *a = push(*a, &tile[first - shift..first - shift + v]);
                continue;
            }
            let mut len = 0;
            for element in 0..v {
                let j = layout.logical(chunk, worker, element);
                if (shift..n + shift).contains(&j) {
                    pack[len] = tile[j - shift];
                    len += 1;
                }
            }
            *a = push(*a, &pack[..len]);
        }
    }
    acc
}

fn reduce_row(tile: &[f32], op: ReduceOp, layout: &Layout, shift: usize, tree: TreeLevels) -> f32 {
    let acc = worker_accumulators(tile, layout, shift, op.identity(), |a, pack| {
        pack.iter().fold(a, |a, &x| op.combine(a, x))
    });
    reduce_tree(&acc, op, tree)
}

/// A running (max, sum of exp(x - max)): one pack of a worker's elements
/// pushed. The pack's maximum comes first, so the sum is rescaled at most
/// once per pack and each element costs one exp (the generated kernel's
/// order: no per-element branch).
pub fn online_push_pack((m, s): (f32, f32), pack: &[f32]) -> (f32, f32) {
    let pack_max = pack.iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x));
    let (m, mut s) = if pack_max > m {
        (pack_max, s * (m - pack_max).exp())
    } else {
        (m, s)
    };
    // A running maximum of -inf means every element so far is -inf (a
    // masked entry) or NaN: each -inf adds exp(-inf) = 0 rather than
    // exp(-inf - -inf) = NaN, so a worker holding only masked entries
    // stays empty, while a NaN still propagates.
    let base = if m == f32::NEG_INFINITY { 0.0 } else { m };
    for &x in pack {
        s += (x - base).exp();
    }
    (m, s)
}

/// Two running (max, sum) pairs combined, the first operand's term first;
/// an empty pair (sum 0) contributes 0 even where its max is -inf.
pub fn online_combine((m1, s1): (f32, f32), (m2, s2): (f32, f32)) -> (f32, f32) {
    let m = m1.max(m2);
    let term = |mi: f32, si: f32| if si == 0.0 { 0.0 } else { si * (mi - m).exp() };
    (m, term(m1, s1) + term(m2, s2))
}

/// `sum(exp(x - max(x)))` by the plan's online normalizer: each worker's
/// running pair in chunk/element order, then the same butterflies as
/// [`reduce_tree`] over (max, sum) pairs.
fn reduce_sum_exp_row(tile: &[f32], layout: &Layout, shift: usize, tree: TreeLevels) -> f32 {
    let acc = worker_accumulators(
        tile,
        layout,
        shift,
        (f32::NEG_INFINITY, 0.0f32),
        online_push_pack,
    );
    tree_combine(acc, tree, online_combine).1
}

/// Does [`Instr::Rescaled`] take its cold path? Where the fast statistic
/// `check` is not finite, or (layernorm) `check * 2^LN_CANCEL_BITS <
/// mean^2`. The generated kernel's test, operation for operation.
pub fn is_cold(stat: RowStat, check: f32, mean: Option<f32>) -> bool {
    let finite = check.abs() <= f32::MAX;
    match (stat, mean) {
        (RowStat::LnRstd, Some(m)) => !(finite && check * (1u64 << LN_CANCEL_BITS) as f32 >= m * m),
        _ => !finite,
    }
}

/// The cold path of [`Instr::Rescaled`]: the normalised row `h` (before
/// weight and bias), each sum a compensated one in element order with every
/// operation rounded on its own (the generated kernel's `lf_cold_row`,
/// which every thread of the row runs alike). rmsnorm scales h by
/// [`RESCUE_SCALE`]; layernorm scales h by a power of two to order 1,
/// centres it on its first element and takes two passes, so overflowing,
/// tiny, constant and far-offset rows all come out right. The smallest
/// normal f32 under rmsnorm's square root keeps an all-zero row finite;
/// layernorm adds `eps`, the program's.
pub fn cold_row(stat: RowStat, eps: f32, h: &[f32]) -> Vec<f32> {
    let n = h.len() as f32;
    match stat {
        RowStat::RmsRstd => {
            let s = RESCUE_SCALE;
            let acc = kahan_sum(h.iter().map(|&v| {
                let t = v * s;
                t * t
            }));
            let rstd = (1.0 / (acc / n + f32::MIN_POSITIVE).sqrt()) * s;
            h.iter().map(|&v| v * rstd).collect()
        }
        RowStat::LnRstd => {
            let bad = h.iter().any(|v| !v.is_finite());
            let amax = h.iter().fold(0.0f32, |m, v| {
                if v.abs() <= f32::MAX && v.abs() > m {
                    v.abs()
                } else {
                    m
                }
            });
            let e = (amax.to_bits() >> 23).clamp(1, 253);
            let s = f32::from_bits((254 - e) << 23);
            let k = h[0] * s;
            let m1 = kahan_sum(h.iter().map(|&v| v * s - k)) / n;
            let var = kahan_sum(h.iter().map(|&v| {
                let d = (v * s - k) - m1;
                d * d
            })) / n;
            let rstd = if bad {
                f32::NAN
            } else if s <= 1.0 {
                let q = var + eps * (s * s);
                if q > 0.0 {
                    1.0 / q.sqrt()
                } else {
                    0.0
                }
            } else {
                let u = (var / s) / s;
                1.0 / (s * (u + eps).sqrt())
            };
            h.iter().map(|&v| ((v * s - k) - m1) * rstd).collect()
        }
    }
}

/// Kahan's compensated sum in element order (the slow path's; its error
/// does not grow with the row length the way a single running sum's does).
/// Where the plain running sum is not finite it is the answer: an infinity
/// stays one (the compensation of an infinite sum is NaN).
fn kahan_sum(values: impl Iterator<Item = f32>) -> f32 {
    let (mut sum, mut c, mut plain) = (0.0f32, 0.0f32, 0.0f32);
    for v in values {
        plain += v;
        let y = v - c;
        let t = sum + y;
        c = (t - sum) - y;
        sum = t;
    }
    if plain.is_finite() {
        sum
    } else {
        plain
    }
}

/// Run `plan` over `inputs`, writing every element of `outputs`.
pub fn execute(plan: &Plan, inputs: &Buffers, outputs: &mut Buffers) -> Result<(), ExecError> {
    run(plan, Source::Shared(inputs), outputs)
}

/// Run an in-place plan ([`Plan::in_place_pair`]): its row output is
/// written over its first row input in `buffers`, its other outputs into
/// `outputs`. The same bits as [`execute`]: each block of rows is read
/// whole before any of it is written, and a row reads only itself (and
/// the columns and per-row inputs, which nothing writes).
pub fn execute_in_place(
    plan: &Plan,
    buffers: &mut Buffers,
    outputs: &mut Buffers,
) -> Result<(), ExecError> {
    let (input, output) = plan
        .in_place_pair()
        .ok_or_else(|| ExecError::NotInPlace(plan.describe()))?;
    let source = Source::InPlace {
        buffers,
        input,
        output,
    };
    run(plan, source, outputs)
}

fn run(plan: &Plan, mut source: Source<'_>, outputs: &mut Buffers) -> Result<(), ExecError> {
    let problem = &plan.problem;
    check_inputs(problem, source.buffers())?;
    let (rows, n) = (problem.shape.rows, problem.shape.n);
    let program = &problem.program;
    let aliased = match &source {
        Source::InPlace { output, .. } => Some(*output),
        Source::Shared(_) => None,
    };
    for decl in &program.outputs {
        if aliased == Some(decl.name.as_str()) {
            continue;
        }
        let expected = expected_len(decl.kind, rows, n);
        let t = outputs
            .entry(decl.name.clone())
            .or_insert_with(|| Tensor::poisoned(decl.kind.float_dtype(problem.dtype), expected));
        if t.len() != expected {
            return Err(ExecError::OutputLength {
                name: decl.name.clone(),
                got: t.len(),
                expected,
            });
        }
    }
    let dtype = problem.dtype;
    // Column inputs widened once, not once a row.
    let columns: Vec<Option<Vec<f32>>> = {
        let inputs = source.buffers();
        program
            .body
            .iter()
            .map(|instr| match instr {
                Instr::Load { buffer }
                    if program.input(buffer).expect("verified").kind == BufferKind::Column =>
                {
                    Some(inputs[buffer].get_range(0, n))
                }
                _ => None,
            })
            .collect()
    };
    let eval_row = |inputs: &Buffers, row: usize| -> Vec<(usize, Val)> {
        let mut vals: Vec<Val> = Vec::with_capacity(program.body.len());
        let mut stored = vec![];
        for (at, instr) in program.body.iter().enumerate() {
            let v = match instr {
                Instr::Load { buffer } => {
                    let decl = program.input(buffer).expect("verified");
                    let t = &inputs[buffer];
                    match decl.kind {
                        BufferKind::Row => Val::Tile(t.get_range(row * n, n)),
                        BufferKind::Column => {
                            Val::Tile(columns[at].clone().expect("widened above"))
                        }
                        BufferKind::RowIndex => Val::Index(t.index(row)),
                        BufferKind::RowScalar | BufferKind::RowScalarF32 => Val::Scalar(t.get(row)),
                    }
                }
                Instr::Const(c) => Val::Scalar(*c),
                Instr::RowFirst { buffer } => Val::Scalar(inputs[buffer].get(row * n)),
                Instr::RowLen => Val::Scalar(n as f32),
                Instr::Unary { op, arg } => match &vals[arg.index()] {
                    Val::Tile(t) => Val::Tile(unary_tile(*op, t)),
                    s => Val::Scalar(unary(*op, s.scalar())),
                },
                Instr::Binary { op, lhs, rhs } => match (&vals[lhs.index()], &vals[rhs.index()]) {
                    (Val::Tile(a), Val::Tile(b)) => Val::Tile(binary_tile(*op, a, b)),
                    (a, b) => Val::Scalar(binary(*op, a.scalar(), b.scalar())),
                },
                Instr::Broadcast(s) => Val::Tile(vec![vals[s.index()].scalar(); n]),
                Instr::Reduce { op, arg } => Val::Scalar(reduce_row(
                    vals[arg.index()].tile(),
                    *op,
                    &plan.layout,
                    plan.row_shift(row),
                    plan.tree,
                )),
                Instr::ReduceSumExp { arg, .. } => Val::Scalar(reduce_sum_exp_row(
                    vals[arg.index()].tile(),
                    &plan.layout,
                    plan.row_shift(row),
                    plan.tree,
                )),
                Instr::RoundToStorage(v) => match &vals[v.index()] {
                    Val::Tile(t) => Val::Tile(t.iter().map(|&x| dtype.round(x)).collect()),
                    s => Val::Scalar(dtype.round(s.scalar())),
                },
                Instr::MaskIndex { tile, index } => {
                    let idx = vals[index.index()].index();
                    let t = vals[tile.index()].tile();
                    Val::Tile(
                        (0..n)
                            .map(|i| if i as i64 == idx { t[i] } else { 0.0 })
                            .collect(),
                    )
                }
                Instr::SelectIndexEq {
                    index,
                    sentinel,
                    if_eq,
                    otherwise,
                } => {
                    let pick = if vals[index.index()].index() == *sentinel {
                        if_eq
                    } else {
                        otherwise
                    };
                    Val::Scalar(vals[pick.index()].scalar())
                }
                Instr::Rescaled {
                    stat,
                    check,
                    mean,
                    fast,
                    x,
                    residual,
                } => {
                    let mean = mean.map(|m| vals[m.index()].scalar());
                    if !is_cold(*stat, vals[check.index()].scalar(), mean) {
                        Val::Scalar(vals[fast.index()].scalar())
                    } else {
                        // The row's outputs again, and nothing after.
                        let x = &inputs[x];
                        let mut h = x.get_range(row * n, n);
                        if let Some(r) = residual {
                            let r = inputs[r].get_range(row * n, n);
                            h.iter_mut()
                                .zip(r)
                                .for_each(|(h, r)| *h = dtype.round(*h + r));
                        }
                        let eps = program.norm_eps().unwrap_or(LAYERNORM_EPS);
                        let mut y = cold_row(*stat, eps, &h);
                        // Each rounded on its own, as the kernel's are.
                        if let Some(w) = inputs
                            .get("weight")
                            .filter(|_| program.input("weight").is_some())
                        {
                            y.iter_mut().enumerate().for_each(|(i, v)| *v *= w.get(i));
                        }
                        if let Some(b) = inputs
                            .get("bias")
                            .filter(|_| program.input("bias").is_some())
                        {
                            y.iter_mut().enumerate().for_each(|(i, v)| *v += b.get(i));
                        }
                        for (slot, decl) in program.outputs.iter().enumerate() {
                            if decl.kind != BufferKind::Row {
                                continue;
                            }
                            let tile = if decl.name == "h" {
                                h.clone()
                            } else {
                                y.clone()
                            };
                            stored.push((slot, Val::Tile(tile)));
                        }
                        return stored;
                    }
                }
                Instr::Store { buffer, value } => {
                    let slot = program
                        .outputs
                        .iter()
                        .position(|b| &b.name == buffer)
                        .unwrap();
                    stored.push((slot, vals[value.index()].clone()));
                    Val::Effect
                }
            };
            vals.push(v);
        }
        stored
    };

    // Rows in parallel, a block at a time so memory stays bounded.
    const ROW_BLOCK: usize = 256;
    for start in (0..rows).step_by(ROW_BLOCK) {
        let end = (start + ROW_BLOCK).min(rows);
        let results: Vec<Vec<(usize, Val)>> = {
            let inputs = source.buffers();
            (start..end)
                .into_par_iter()
                .map(|row| eval_row(inputs, row))
                .collect()
        };
        for (k, stored) in results.into_iter().enumerate() {
            let row = start + k;
            for (slot, val) in stored {
                let name = &program.outputs[slot].name;
                let out = match &mut source {
                    Source::InPlace {
                        buffers,
                        input,
                        output,
                    } if *output == name.as_str() => buffers.get_mut(*input).unwrap(),
                    _ => outputs.get_mut(name).unwrap(),
                };
                match val {
                    Val::Tile(t) => out.set_range(row * n, &t),
                    Val::Scalar(s) => out.set(row, s),
                    Val::Index(_) | Val::Effect => unreachable!("verified store"),
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod shifted_layout_tests {
    use super::*;
    use proptest::prelude::*;
    use std::cell::RefCell;

    proptest! {
        /// A row shifted by s < V: every element is pushed exactly once,
        /// in order within each worker, and every whole pack starts on a
        /// V-element boundary of the shifted row (a vector access).
        #[test]
        fn a_shifted_row_is_covered_once_in_aligned_packs(
            n in 1usize..3000, w_log in 0u32..8, v_log in 0u32..4, shift_seed in 0usize..8,
        ) {
            let v = 1usize << v_log;
            let shift = shift_seed % v;
            let layout = Layout { workers: 1 << w_log, pack: v as u32, unroll: 1, rows_per_group: 1 };
            let tile: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let packs = RefCell::new(vec![]);
            worker_accumulators(&tile, &layout, shift, (), |(), pack| {
                packs.borrow_mut().push(pack.to_vec());
            });
            let mut seen = vec![false; n];
            for pack in packs.into_inner() {
                for (k, &x) in pack.iter().enumerate() {
                    let i = x as usize;
                    prop_assert!(!seen[i], "element {} pushed twice", i);
                    seen[i] = true;
                    if k > 0 {
                        prop_assert_eq!(i, pack[k - 1] as usize + 1);
                    }
                }
                if pack.len() == v {
                    prop_assert_eq!((pack[0] as usize + shift) % v, 0);
                }
            }
            prop_assert!(seen.iter().all(|&s| s));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Tensor;
    use crate::data::{poisoned_outputs, random_inputs};
    use lanefold_ir::{DType, Operator, OperatorOptions, IGNORE_INDEX, LAYERNORM_EPS, RMSNORM_EPS};
    use lanefold_plan::{plan, LayoutRequest, Problem, Shape, Target};

    fn run(op: Operator, shape: &str, w: u32, v: u32, dtype: DType) -> (Plan, Buffers, Buffers) {
        let problem = Problem::operator(
            op,
            OperatorOptions::default(),
            dtype,
            shape.parse().unwrap(),
        );
        let request = LayoutRequest {
            workers: w,
            pack: v,
            ..Default::default()
        };
        let plan = plan(&problem, &Target::cpu(), &request).unwrap();
        let inputs = random_inputs(&problem, 7);
        let mut outputs = poisoned_outputs(&problem);
        execute(&plan, &inputs, &mut outputs).unwrap();
        (plan, inputs, outputs)
    }

    #[test]
    fn sum_with_one_worker_equals_a_sequential_loop_bit_for_bit() {
        let (_, inputs, outputs) = run(Operator::Sum, "5x4103", 1, 1, DType::F32);
        let (x, y) = (&inputs["x"], &outputs["y"]);
        for row in 0..5 {
            let mut s = 0f32;
            for i in 0..4103 {
                s += x.get(row * 4103 + i);
            }
            assert_eq!(s.to_bits(), y.get(row).to_bits(), "row {row}");
        }
    }

    #[test]
    fn wider_trees_change_the_bits_but_not_the_value() {
        let (_, inputs, seq) = run(Operator::Sum, "3x4096", 1, 1, DType::F32);
        let (_, _, tree) = run(Operator::Sum, "3x4096", 256, 4, DType::F32);
        let x = &inputs["x"];
        let mut differs = false;
        for row in 0..3 {
            let exact: f64 = (0..4096).map(|i| x.get(row * 4096 + i) as f64).sum();
            let (a, b) = (seq["y"].get(row), tree["y"].get(row));
            differs |= a.to_bits() != b.to_bits();
            assert!((a as f64 - exact).abs() < 1e-3 && (b as f64 - exact).abs() < 1e-3);
        }
        assert!(
            differs,
            "a 256-worker tree should reorder at least one of three sums"
        );
    }

    #[test]
    fn reduce_tree_is_the_butterfly_order() {
        // Four lanes: ((a+c) + (b+d)) in the xor order off=2 then off=1.
        let tree = TreeLevels {
            lanes: 4,
            warps: 1,
            groups: 1,
        };
        let (a, b, c, d) = (1e8f32, 1.0f32, -1e8f32, 1.0f32);
        let got = reduce_tree(&[a, b, c, d], ReduceOp::Sum, tree);
        assert_eq!(got, (a + c) + (b + d));
        assert_ne!(got, ((a + b) + c) + d);
    }

    #[test]
    fn the_online_normalizer_matches_the_two_pass_sum_with_empty_workers_too() {
        let tile: Vec<f32> = (0..300)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.37)
            .collect();
        let m = tile.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let want: f64 = tile.iter().map(|&x| ((x - m) as f64).exp()).sum();
        for (w, v, lanes, warps, groups) in [
            (1, 1, 1, 1, 1),
            (32, 4, 32, 1, 1),
            (1024, 1, 32, 32, 1),
            (2048, 4, 32, 8, 8),
        ] {
            let layout = Layout {
                workers: w,
                pack: v,
                unroll: 1,
                rows_per_group: 1,
            };
            let tree = TreeLevels {
                lanes,
                warps,
                groups,
            };
            // Most of the 1024 and 2048 workers hold nothing: (-inf, 0) pairs.
            let got = reduce_sum_exp_row(&tile, &layout, 0, tree) as f64;
            assert!(
                (got - want).abs() <= 1e-5 * want,
                "W={w} V={v}: {got} vs {want}"
            );
        }
        assert_eq!(
            online_combine((f32::NEG_INFINITY, 0.0), (f32::NEG_INFINITY, 0.0)),
            (f32::NEG_INFINITY, 0.0)
        );
        assert_eq!(
            online_push_pack((f32::NEG_INFINITY, 0.0), &[3.0]),
            (3.0, 1.0)
        );
        // An empty pack (a guarded tail) leaves the pair alone.
        assert_eq!(online_push_pack((2.0, 5.0), &[]), (2.0, 5.0));
        // A pack whose maximum grows the running one rescales the sum once.
        let (m, s) = online_push_pack((0.0, 1.0), &[1.0, 3.0]);
        assert_eq!(m, 3.0);
        assert!((s - ((-3.0f32).exp() + (-2.0f32).exp() + 1.0)).abs() < 1e-6);
    }

    /// One-pass moments about the row's first element: rows offset by 100
    /// spreads, with a first element 10 spreads out, pass f32's 1e-5
    /// against float64 as the two-pass plan does (the same rows with the
    /// naive unshifted sum of squares would lose about 1e4 ulp).
    #[test]
    fn one_pass_moments_stay_accurate_on_offset_rows_with_an_outlying_first_element() {
        let problem = Problem::operator(
            Operator::Layernorm,
            OperatorOptions::default(),
            DType::F32,
            "4x4096".parse().unwrap(),
        );
        let request = LayoutRequest {
            workers: 256,
            pack: 4,
            one_pass_moments: true,
            ..Default::default()
        };
        let mut inputs = random_inputs(&problem, 3);
        let x = inputs.get_mut("x").unwrap();
        let spread = {
            let m = (0..x.len()).map(|i| x.get(i) as f64).sum::<f64>() / x.len() as f64;
            ((0..x.len())
                .map(|i| (x.get(i) as f64 - m).powi(2))
                .sum::<f64>()
                / x.len() as f64)
                .sqrt() as f32
        };
        for i in 0..x.len() {
            let v = x.get(i);
            x.set(i, 100.0 * spread + v);
        }
        for row in 0..4 {
            x.set(row * 4096, 110.0 * spread);
        }
        let want = crate::reference::reference(&problem, &inputs).unwrap();
        for one_pass_moments in [false, true] {
            let request = LayoutRequest {
                one_pass_moments,
                ..request
            };
            let plan = plan(&problem, &Target::h200(), &request).unwrap();
            assert_eq!(plan.one_pass_moments(), one_pass_moments);
            let mut outputs = poisoned_outputs(&problem);
            execute(&plan, &inputs, &mut outputs).unwrap();
            let v = crate::validate::validate(DType::F32, &outputs, &want);
            assert!(
                v.pass,
                "{}: worst rel err {:.3e}",
                plan.describe(),
                v.worst_rel_err()
            );
        }
    }

    /// The fused output form applies to 16-bit rows only, and there its
    /// per-row rounding of `mean * rstd` stays far inside the tolerance
    /// even on rows offset by 1000 spreads (which bf16 itself can barely
    /// hold: the inputs' own rounding is a few spreads there).
    #[test]
    fn fused_output_applies_to_16_bit_rows_only_and_holds_on_offset_rows() {
        for dtype in [DType::F32, DType::Bf16, DType::F16] {
            for op in [Operator::Layernorm, Operator::ResidualLayernorm] {
                let problem = Problem::operator(
                    op,
                    OperatorOptions::default(),
                    dtype,
                    "4x4096".parse().unwrap(),
                );
                for one_pass_moments in [false, true] {
                    let request = LayoutRequest {
                        workers: 256,
                        pack: 4,
                        fused_output: true,
                        one_pass_moments,
                        ..Default::default()
                    };
                    let plan = plan(&problem, &Target::h200(), &request).unwrap();
                    assert_eq!(plan.fused_output(), dtype != DType::F32, "{op} {dtype}");
                    assert_eq!(plan.one_pass_moments(), one_pass_moments);
                    if dtype == DType::F32 {
                        continue;
                    }
                    let mut inputs = random_inputs(&problem, 5);
                    // f16 cannot hold 1000 spreads of a unit-spread row.
                    let offset = if dtype == DType::Bf16 { 1000.0 } else { 100.0 };
                    let x = inputs.get_mut("x").unwrap();
                    for i in 0..x.len() {
                        let v = x.get(i);
                        x.set(i, offset + v);
                    }
                    let want = crate::reference::reference(&problem, &inputs).unwrap();
                    let mut outputs = poisoned_outputs(&problem);
                    execute(&plan, &inputs, &mut outputs).unwrap();
                    let v = crate::validate::validate(dtype, &outputs, &want);
                    assert!(
                        v.pass,
                        "{}: worst rel err {:.3e}",
                        plan.describe(),
                        v.worst_rel_err()
                    );
                }
            }
        }
    }

    #[test]
    fn every_output_element_is_written() {
        for op in Operator::SIX {
            let (_, _, outputs) = run(op, "5x257", 32, 4, DType::Bf16);
            for (name, t) in &outputs {
                assert!(
                    (0..t.len()).all(|i| !t.get(i).is_nan()),
                    "{op}: {name} has NaN"
                );
            }
        }
    }

    /// `op` over the given rows of x (and the residual, where the operator
    /// has one, and targets for cross_entropy) on the plan `request` makes,
    /// weight 1 and bias 0: the outputs, the float64 reference and its
    /// validation.
    fn run_rows(
        op: Operator,
        dtype: DType,
        rows: &[Vec<f32>],
        targets: &[i64],
        request: LayoutRequest,
    ) -> (Plan, Buffers, crate::validate::Validation) {
        run_rows_on(&Target::cpu(), op, dtype, rows, targets, request)
    }

    fn run_rows_on(
        target: &Target,
        op: Operator,
        dtype: DType,
        rows: &[Vec<f32>],
        targets: &[i64],
        request: LayoutRequest,
    ) -> (Plan, Buffers, crate::validate::Validation) {
        let n = rows[0].len();
        let shape = Shape::new(rows.len(), n).unwrap();
        let problem = Problem::operator(op, OperatorOptions::default(), dtype, shape);
        let p = plan(&problem, target, &request).unwrap();
        let flat: Vec<f32> = rows.concat();
        let mut inputs = Buffers::new();
        for decl in &problem.program.inputs {
            let t = match decl.name.as_str() {
                "x" => Tensor::from_f32(dtype, &flat),
                "residual" => Tensor::from_f32(dtype, &vec![0.0; flat.len()]),
                "weight" => Tensor::from_f32(dtype, &vec![1.0; n]),
                "bias" => Tensor::from_f32(dtype, &vec![0.0; n]),
                "target" => Tensor::I64(targets.to_vec()),
                other => panic!("unexpected input {other}"),
            };
            inputs.insert(decl.name.clone(), t);
        }
        let mut outputs = poisoned_outputs(&p.problem);
        execute(&p, &inputs, &mut outputs).unwrap();
        let want = crate::reference::reference(&p.problem, &inputs).unwrap();
        let v = crate::validate::validate(dtype, &outputs, &want);
        let oracle = crate::oracle::expected(&p.problem, &inputs).unwrap();
        let o = crate::validate::validate(dtype, &outputs, &oracle);
        assert_eq!(v.pass, o.pass, "reference and oracle disagree: {v:?} {o:?}");
        (p, outputs, v)
    }

    /// The plans a semantic must hold on: one worker, a tree whose workers
    /// each hold a few elements, and the online normalizer and one-pass
    /// moments where the operator has them.
    fn requests() -> Vec<LayoutRequest> {
        let base = LayoutRequest {
            workers: 32,
            pack: 1,
            ..Default::default()
        };
        vec![
            LayoutRequest {
                workers: 1,
                pack: 1,
                ..Default::default()
            },
            base,
            LayoutRequest {
                online_normalizer: true,
                one_pass_moments: true,
                ..base
            },
        ]
    }

    /// By default the norms take their cold path: f32 rows at 1e30, whose
    /// sum of squares overflows, meet float64 under the automatic plan of
    /// rmsnorm, layernorm and residual_layernorm. They normalised to 0
    /// when the cold path was opt-in, as they still do with
    /// `no-cold-path`.
    #[test]
    fn regression_norm_f32_rows_at_1e30_normalised_to_zero_by_default() {
        let row: Vec<f32> = (0..300)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 2e28)
            .collect();
        for op in [
            Operator::Rmsnorm,
            Operator::Layernorm,
            Operator::ResidualLayernorm,
        ] {
            for no_cold_path in [false, true] {
                let request = LayoutRequest {
                    no_cold_path,
                    ..Default::default()
                };
                let rows = [row.clone(), row.iter().map(|x| -x * 0.5).collect()];
                let (p, out, v) = run_rows(op, DType::F32, &rows, &[], request);
                assert_eq!(p.cold_path(), !no_cold_path, "{op}");
                assert_eq!(v.pass, !no_cold_path, "{op} {}: {v:?}", p.describe());
                if no_cold_path {
                    assert!((0..600).all(|i| out["y"].get(i) == 0.0), "{op}");
                } else {
                    assert!(v.worst_rel_err() < 1e-5, "{op}: {v:?}");
                }
            }
        }
    }

    /// Tiny and subnormal rows, where epsilon dominates the statistic (as
    /// in torch), constant and far-offset rows: the default plans of the
    /// three norms, f32 and bf16, meet float64.
    #[test]
    fn default_norm_plans_meet_float64_on_tiny_subnormal_constant_and_offset_rows() {
        let wave = |scale: f32, offset: f32| -> Vec<f32> {
            (0..300)
                .map(|i| offset + ((i * 37 % 101) as f32 - 50.0) / 50.0 * scale)
                .collect()
        };
        let rows = vec![
            wave(1e-20, 0.0),
            wave(1e-39, 0.0),
            wave(1e-44, 0.0),
            vec![7.25; 300],
            wave(1.0, 1e6),
        ];
        for op in [
            Operator::Rmsnorm,
            Operator::Layernorm,
            Operator::ResidualLayernorm,
        ] {
            for dtype in [DType::F32, DType::Bf16] {
                let (p, _, v) = run_rows(op, dtype, &rows, &[], LayoutRequest::default());
                assert!(p.cold_path(), "{op} {dtype}");
                assert!(v.pass, "{op} {dtype} {}: {v:?}", p.describe());
            }
        }
    }

    const NEG: f32 = f32::NEG_INFINITY;

    /// A row whose first 64 entries are masked: with 32 workers of one
    /// element, whole workers hold only -inf.
    fn masked_row() -> Vec<f32> {
        (0..96)
            .map(|i| {
                if i < 64 || i % 3 == 0 {
                    NEG
                } else {
                    (i % 7) as f32 * 0.5
                }
            })
            .collect()
    }

    #[test]
    fn masked_softmax_rows_are_zero_where_masked_and_a_fully_masked_row_is_nan() {
        for request in requests() {
            let rows = vec![masked_row(), vec![NEG; 96]];
            let (p, out, v) = run_rows(Operator::Softmax, DType::F32, &rows, &[], request);
            assert!(v.pass, "{}: {v:?}", p.describe());
            let y = &out["y"];
            let total: f32 = (0..96).map(|i| y.get(i)).sum();
            assert!((total - 1.0).abs() < 1e-5, "{}", p.describe());
            for (i, &x) in rows[0].iter().enumerate() {
                if x == NEG {
                    assert_eq!(y.get(i), 0.0, "{} [{i}]", p.describe());
                }
                assert!(y.get(96 + i).is_nan(), "{} [{i}]", p.describe());
            }
        }
    }

    /// Masked long rows went NaN in the online normalizer: the H200's plan
    /// families for long rows (registers, streamed, clusters, pushed and
    /// persistent clusters, prefetched rows), each with and without the
    /// online normalizer, run by the executor in their reduction order on
    /// rows of 65,536 mostly masked entries (whole workers of -inf) and a
    /// fully masked row: they meet float64, and the masked entries are 0.
    #[test]
    fn regression_masked_long_rows_went_nan_on_every_plan_family() {
        let n = 1 << 16;
        let masked: Vec<f32> = (0..n)
            .map(|i| {
                if i % 4096 < 3000 {
                    NEG
                } else {
                    (i % 13) as f32 * 0.3
                }
            })
            .collect();
        let rows = vec![masked.clone(), vec![NEG; n]];
        for schedule in [
            "W=1024 V=4 G=1",
            "W=1024 V=4 G=1 stream",
            "W=8192 V=4 G=1",
            "W=8192 V=4 G=1 push-reduce",
            "W=8192 V=4 G=1 push-reduce persistent-clusters",
            "W=1024 V=4 G=1 prefetch-rows",
        ] {
            for online in ["", " online-normalizer"] {
                let request: LayoutRequest = format!("{schedule}{online}").parse().unwrap();
                for (op, targets) in [
                    (Operator::Softmax, &[][..]),
                    (Operator::CrossEntropy, &[5, 1]),
                ] {
                    let (p, out, v) =
                        run_rows_on(&Target::h200(), op, DType::Bf16, &rows, targets, request);
                    assert!(v.pass, "{op} {}: {v:?}", p.describe());
                    if op == Operator::Softmax {
                        assert_eq!(out["y"].get(0), 0.0, "{}", p.describe());
                        assert!(out["y"].get(n).is_nan(), "a fully masked row is NaN");
                    } else {
                        assert!(out["loss"].get(0).is_infinite(), "a masked target");
                    }
                }
            }
        }
    }

    #[test]
    fn regression_online_normalizer_worker_of_masked_entries_went_nan() {
        // Every worker of a W=32 V=1 plan holds one element; the first 64
        // are -inf: their running pairs were (-inf, exp(-inf - -inf)) = NaN.
        let (m, s) = online_push_pack((NEG, 0.0), &[NEG, NEG]);
        assert_eq!((m, s), (NEG, 0.0));
        assert!(online_push_pack((NEG, 0.0), &[NEG, f32::NAN]).1.is_nan());
        let request = LayoutRequest {
            online_normalizer: true,
            ..requests()[1]
        };
        let (p, out, v) = run_rows(
            Operator::Softmax,
            DType::Bf16,
            &[masked_row()],
            &[],
            request,
        );
        assert!(p.online_normalizer());
        assert!(v.pass && !out["y"].get(70).is_nan(), "{v:?}");
    }

    #[test]
    fn cross_entropy_is_plus_inf_on_a_masked_target_nan_on_a_masked_row_and_zero_when_ignored() {
        for request in requests() {
            let nan_row: Vec<f32> = (0..96)
                .map(|i| if i == 5 { f32::NAN } else { 1.0 })
                .collect();
            let rows = vec![
                masked_row(),
                masked_row(),
                vec![NEG; 96],
                nan_row.clone(),
                nan_row,
            ];
            // Row 0's target is masked, row 1's is not.
            let targets = [0, 71, 3, 2, IGNORE_INDEX];
            let (p, out, v) =
                run_rows(Operator::CrossEntropy, DType::F32, &rows, &targets, request);
            assert!(v.pass, "{}: {v:?}", p.describe());
            let loss = &out["loss"];
            assert_eq!(loss.get(0), f32::INFINITY, "{}", p.describe());
            assert!(loss.get(1).is_finite() && loss.get(1) > 0.0);
            assert!(loss.get(2).is_nan() && loss.get(3).is_nan());
            assert_eq!(loss.get(4), 0.0, "an ignored row's loss is 0 even over NaN");
        }
    }

    #[test]
    fn nan_and_infinities_propagate_like_torch() {
        let mut row: Vec<f32> = (0..64).map(|i| i as f32 * 0.1 - 3.0).collect();
        row[9] = f32::NAN;
        let mut inf_row: Vec<f32> = (0..64).map(|i| i as f32 * 0.1 - 3.0).collect();
        inf_row[20] = f32::INFINITY;
        for request in requests() {
            for op in [Operator::Softmax, Operator::Rmsnorm, Operator::Layernorm] {
                // layernorm's one-pass moments are a known limit here
                // (regression_layernorm_one_pass_moments_of_a_masked_row_were_not_nan).
                if op == Operator::Layernorm && request.one_pass_moments {
                    continue;
                }
                let rows = vec![row.clone(), inf_row.clone()];
                let (p, out, v) = run_rows(op, DType::F32, &rows, &[], request);
                assert!(v.pass, "{op} {}: {v:?}", p.describe());
                let y = &out["y"];
                assert!((0..64).all(|i| y.get(i).is_nan()), "{op}: a NaN row is NaN");
                for i in 0..64 {
                    let got = y.get(64 + i);
                    match op {
                        // x * rsqrt(inf): 0, and inf * 0 = NaN.
                        Operator::Rmsnorm if i != 20 => assert_eq!(got, 0.0),
                        _ => assert!(got.is_nan(), "{op} [{i}] {got}"),
                    }
                }
            }
        }
    }

    /// Rows of |x| from 1e19 to 3e38, mixed signs: the sum of squares
    /// overflows f32 and the slow path gives the normalised row.
    fn huge_rows() -> Vec<Vec<f32>> {
        let pattern = |scale: f32| -> Vec<f32> {
            (0..257)
                .map(|i| {
                    let v = ((i * 37 % 101) as f32 - 50.0) / 50.0;
                    v * scale
                })
                .collect()
        };
        vec![
            pattern(1e19),
            pattern(1e30),
            pattern(3.0e38),
            vec![3.0e38; 257],
            (0..257)
                .map(|i| if i % 2 == 0 { 3.0e38 } else { -3.0e38 })
                .collect(),
        ]
    }

    /// Rows of a norm `op` whose sum of squares overflows, on every plan
    /// of [`requests`], plain and with the fused output: they validate and
    /// their outputs are of order 1.
    fn overflowing_rows_are_normalised(ops: &[Operator]) {
        for dtype in [DType::F32, DType::Bf16] {
            for &op in ops {
                for request in requests() {
                    for fused_output in [false, true] {
                        let request = LayoutRequest {
                            fused_output,
                            ..request
                        };
                        let (p, out, v) = run_rows(op, dtype, &huge_rows(), &[], request);
                        assert!(v.pass, "{op} {dtype} {}: {:?}", p.describe(), v.outputs);
                        let y = &out["y"];
                        assert!(
                            (0..y.len()).all(|i| y.get(i).abs() <= 3.0),
                            "{op} {dtype} {}: outputs of order 1",
                            p.describe()
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn rmsnorm_rows_whose_sum_of_squares_overflows_are_normalised() {
        overflowing_rows_are_normalised(&[Operator::Rmsnorm]);
    }

    #[test]
    fn regression_layernorm_rows_whose_sum_of_squares_overflows_went_to_zero() {
        overflowing_rows_are_normalised(&[Operator::Layernorm, Operator::ResidualLayernorm]);
    }

    #[test]
    fn regression_fused_output_overflowed_on_a_huge_constant_row() {
        // h * rstd and mean * rstd with rstd = 1/sqrt(eps) overflow at
        // |h| > 1e36 although the moments do not.
        let request = LayoutRequest {
            fused_output: true,
            ..requests()[0]
        };
        let rows = vec![vec![1.9672574e38f32], vec![-1.3246949e32]];
        let (p, out, v) = run_rows(
            Operator::ResidualLayernorm,
            DType::Bf16,
            &rows,
            &[],
            request,
        );
        assert!(p.fused_output());
        assert!(v.pass, "{v:?}");
        assert_eq!((out["y"].get(0), out["y"].get(1)), (0.0, 0.0));
    }

    #[test]
    fn regression_layernorm_constant_row_normalised_its_mean_rounding() {
        // Summing 1.1 261 times rounds; the mean's error over a variance
        // of 0 gave outputs of order 1e-2 where the answer is the bias.
        for request in requests() {
            let rows = vec![vec![1.1f32; 261], vec![-1234.5678f32; 261]];
            for op in [Operator::Layernorm, Operator::ResidualLayernorm] {
                let (p, out, v) = run_rows(op, DType::F32, &rows, &[], request);
                assert!(v.pass, "{op} {}: {v:?}", p.describe());
                assert!(
                    (0..522).all(|i| out["y"].get(i) == 0.0),
                    "{op} {}",
                    p.describe()
                );
            }
        }
    }

    #[test]
    fn regression_layernorm_offset_row_lost_its_centring_to_the_mean_rounding() {
        // n = 2 rows about 600 with a spread of 0.5: rounding k + mean to
        // f32 cost 1e-4 of the output; centring on k first is exact.
        for request in requests() {
            let rows = vec![vec![601.60046f32, 602.6219], vec![300.80023, 301.31094]];
            let (p, _, v) = run_rows(Operator::Layernorm, DType::F32, &rows, &[], request);
            assert!(
                v.pass && v.worst_rel_err() < 1e-6,
                "{}: {v:?}",
                p.describe()
            );
        }
    }

    #[test]
    fn regression_layernorm_one_pass_moments_of_a_masked_row_were_not_nan() {
        let rows = vec![
            vec![NEG, -1.0487585, 0.5, 1.5],
            vec![0.25, 1.0, NEG, 2.0],
            vec![0.25, 1.0, f32::INFINITY, 2.0],
        ];
        for request in requests() {
            let request = LayoutRequest {
                one_pass_moments: true,
                ..request
            };
            for op in [Operator::Layernorm, Operator::ResidualLayernorm] {
                let (p, out, v) = run_rows(op, DType::F32, &rows, &[], request);
                assert!(p.one_pass_moments());
                assert!(v.pass, "{op} {}: {v:?}", p.describe());
                assert!((0..12).all(|i| out["y"].get(i).is_nan()), "{op}");
            }
        }
    }

    #[test]
    fn regression_rescaled_sum_of_squares_with_an_infinity_went_nan() {
        // The slow path's compensated sum turned an infinite square into
        // NaN: rmsnorm's finite elements must stay 0, as torch's do.
        let y = cold_row(RowStat::RmsRstd, RMSNORM_EPS, &[1.0, NEG, 2.0]);
        assert_eq!((y[0], y[2]), (0.0, 0.0));
        let (_, out, v) = run_rows(
            Operator::Rmsnorm,
            DType::F32,
            &[vec![1.0, NEG, 2.0, 3.0]],
            &[],
            requests()[0],
        );
        assert!(v.pass, "{v:?}");
        assert_eq!(out["y"].get(0), 0.0);
        assert!(out["y"].get(1).is_nan());
    }

    #[test]
    fn tiny_and_subnormal_rows_are_eps_dominated() {
        let tiny: Vec<f32> = (0..100).map(|i| (i as f32 - 49.5) * 1e-38).collect();
        let sub: Vec<f32> = (0..100).map(|i| (i as f32 - 49.5) * 1e-43).collect();
        for request in requests() {
            for op in [Operator::Rmsnorm, Operator::Layernorm] {
                let rows = vec![tiny.clone(), sub.clone()];
                let (p, out, v) = run_rows(op, DType::F32, &rows, &[], request);
                assert!(v.pass, "{op} {}: {v:?}", p.describe());
                let eps = if op == Operator::Rmsnorm {
                    RMSNORM_EPS
                } else {
                    LAYERNORM_EPS
                };
                let want = tiny[0] / eps.sqrt();
                assert!((out["y"].get(0) - want).abs() <= 1e-3 * want.abs(), "{op}");
            }
        }
    }

    /// A caller's eps reaches layernorm's cold path as well as its fast
    /// one: a plain row and a far-offset row (the cancellation the cold path
    /// takes), eps 0.25, against float64 with that eps.
    #[test]
    fn regression_the_cold_path_took_the_default_eps() {
        let eps = 0.25f32;
        let plain: Vec<f32> = (0..64).map(|i| (i as f32 * 0.37).sin()).collect();
        let offset: Vec<f32> = plain.iter().map(|v| 4096.0 + v * 1e-2).collect();
        let none = OperatorOptions {
            weight: false,
            bias: false,
        };
        for request in requests() {
            let shape = Shape::new(2, 64).unwrap();
            let mut problem = Problem::operator(Operator::Layernorm, none, DType::F32, shape);
            assert!(problem.program.set_norm_eps(eps));
            let p = plan(&problem, &Target::cpu(), &request).unwrap();
            let mut inputs = Buffers::new();
            let flat = [plain.clone(), offset.clone()].concat();
            inputs.insert("x".into(), Tensor::from_f32(DType::F32, &flat));
            let mut out = poisoned_outputs(&p.problem);
            execute(&p, &inputs, &mut out).unwrap();
            // Both float64 references read the program's eps too.
            let reference = crate::reference::reference(&p.problem, &inputs).unwrap();
            let oracle = crate::oracle::expected(&p.problem, &inputs).unwrap();
            for want in [reference, oracle] {
                let v = crate::validate::validate(DType::F32, &out, &want);
                assert!(v.pass, "{}: {v:?}", p.describe());
            }
            for (r, row) in [&plain, &offset].into_iter().enumerate() {
                let n = row.len() as f64;
                let mean = row.iter().map(|&v| v as f64).sum::<f64>() / n;
                let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
                for (i, &v) in row.iter().enumerate() {
                    let want = (v as f64 - mean) / (var + eps as f64).sqrt();
                    let got = out["y"].get(r * 64 + i) as f64;
                    assert!(
                        (got - want).abs() <= 1e-4,
                        "{} row {r} [{i}]: {got} against {want}",
                        p.describe()
                    );
                }
            }
        }
    }

    /// cross_entropy_with_grad written in place (dlogits over the logits)
    /// gives the out-of-place loss and dlogits bit for bit, over the
    /// schedule space: every W and V (one thread per row to clusters),
    /// rows per group, both residencies, both normalizers, f32 and bf16,
    /// rows with a partial chunk and ignored targets.
    #[test]
    fn cross_entropy_with_grad_in_place_is_the_out_of_place_result_bit_for_bit() {
        use lanefold_plan::enumerate;
        let mut compared = 0;
        for dtype in [DType::F32, DType::Bf16] {
            for shape in ["7x1000", "5x4099", "3x16384"] {
                let problem = Problem::operator(
                    Operator::CrossEntropyWithGrad,
                    OperatorOptions::default(),
                    dtype,
                    shape.parse().unwrap(),
                );
                let inputs = random_inputs(&problem, 11);
                for base in [
                    "in-place",
                    "in-place G=2",
                    "in-place stream online-normalizer",
                ] {
                    let base: LayoutRequest = base.parse().unwrap();
                    let candidates = enumerate(
                        &problem,
                        &Target::h200(),
                        &base,
                        &[1, 8, 32, 256, 2048],
                        &[1, 4, 8],
                        &[0],
                    );
                    for plan in candidates.into_iter().filter_map(|c| c.outcome.ok()) {
                        let what = format!("{dtype} {shape} {}", plan.describe());
                        assert!(plan.in_place, "{what}");
                        let mut out = poisoned_outputs(&problem);
                        execute(&plan, &inputs, &mut out).unwrap();
                        let mut buffers = inputs.clone();
                        let mut loss = Buffers::new();
                        execute_in_place(&plan, &mut buffers, &mut loss).unwrap();
                        assert!(!loss.contains_key("dx"), "{what}");
                        let bits = |t: &Tensor| -> Vec<u32> {
                            (0..t.len()).map(|i| t.get(i).to_bits()).collect()
                        };
                        assert_eq!(bits(&buffers["x"]), bits(&out["dx"]), "{what}");
                        assert_eq!(bits(&loss["loss"]), bits(&out["loss"]), "{what}");
                        assert_eq!(buffers["target"], inputs["target"], "{what}");
                        compared += 1;
                    }
                }
            }
        }
        assert!(compared >= 60, "only {compared} plans compared");
    }

    /// A plan that does not write in place is refused by the in-place
    /// executor, which would otherwise not know where its output goes.
    #[test]
    fn the_in_place_executor_refuses_a_plan_that_is_not_in_place() {
        let (plan, mut inputs, _) = run(Operator::CrossEntropyWithGrad, "2x100", 32, 1, DType::F32);
        let mut out = Buffers::new();
        let err = execute_in_place(&plan, &mut inputs, &mut out).unwrap_err();
        assert!(matches!(err, ExecError::NotInPlace(_)), "{err}");
    }
}
