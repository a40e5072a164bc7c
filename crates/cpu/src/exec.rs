//! The exact-order executor: runs any legal plan and reproduces its FP32
//! addition order (each worker's recurrence in chunk/element order, then the
//! butterfly tree over lanes, warps and cluster groups), so it is an oracle
//! for the GPU's reduction order as well as a CPU path.

use crate::data::{check_inputs, expected_len, Buffers, DataError, Tensor};
use lanefold_ir::{BinaryOp, BufferKind, Instr, ReduceOp, UnaryOp};
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
/// (a guarded tail pack is shorter, or empty).
fn worker_accumulators<T: Copy>(
    tile: &[f32],
    layout: &Layout,
    init: T,
    push: impl Fn(T, &[f32]) -> T,
) -> Vec<T> {
    let n = tile.len();
    let (w, v) = (layout.workers as usize, layout.pack as usize);
    let mut acc = vec![init; w];
    // V is at most 8 (the layout's legality), so a pack fits on the stack.
    assert!(v <= 8, "V={v}: a legal layout has V of 1, 2, 4 or 8");
    let mut pack = [0.0f32; 8];
    for chunk in 0..layout.chunks(n) {
        for (worker, a) in acc.iter_mut().enumerate() {
            let mut len = 0;
            for element in 0..v {
                let i = layout.logical(chunk, worker, element);
                if i < n {
                    pack[len] = tile[i];
                    len += 1;
                }
            }
            *a = push(*a, &pack[..len]);
        }
    }
    acc
}

fn reduce_row(tile: &[f32], op: ReduceOp, layout: &Layout, tree: TreeLevels) -> f32 {
    let acc = worker_accumulators(tile, layout, op.identity(), |a, pack| {
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
    for &x in pack {
        s += (x - m).exp();
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
fn reduce_sum_exp_row(tile: &[f32], layout: &Layout, tree: TreeLevels) -> f32 {
    let acc = worker_accumulators(tile, layout, (f32::NEG_INFINITY, 0.0f32), online_push_pack);
    tree_combine(acc, tree, online_combine).1
}

/// Run `plan` over `inputs`, writing every element of `outputs`.
pub fn execute(plan: &Plan, inputs: &Buffers, outputs: &mut Buffers) -> Result<(), ExecError> {
    let problem = &plan.problem;
    check_inputs(problem, inputs)?;
    let (rows, n) = (problem.shape.rows, problem.shape.n);
    let program = &problem.program;
    for decl in &program.outputs {
        let expected = expected_len(decl.kind, rows, n);
        let t = outputs
            .entry(decl.name.clone())
            .or_insert_with(|| Tensor::poisoned(problem.dtype, expected));
        if t.len() != expected {
            return Err(ExecError::OutputLength {
                name: decl.name.clone(),
                got: t.len(),
                expected,
            });
        }
    }
    let dtype = problem.dtype;
    let eval_row = |row: usize| -> Vec<(usize, Val)> {
        let mut vals: Vec<Val> = Vec::with_capacity(program.body.len());
        let mut stored = vec![];
        for instr in &program.body {
            let v = match instr {
                Instr::Load { buffer } => {
                    let decl = program.input(buffer).expect("verified");
                    let t = &inputs[buffer];
                    match decl.kind {
                        BufferKind::Row => Val::Tile((0..n).map(|i| t.get(row * n + i)).collect()),
                        BufferKind::Column => Val::Tile((0..n).map(|i| t.get(i)).collect()),
                        BufferKind::RowIndex => Val::Index(t.index(row)),
                        BufferKind::RowScalar => Val::Scalar(t.get(row)),
                    }
                }
                Instr::Const(c) => Val::Scalar(*c),
                Instr::RowFirst { buffer } => Val::Scalar(inputs[buffer].get(row * n)),
                Instr::RowLen => Val::Scalar(n as f32),
                Instr::Unary { op, arg } => match &vals[arg.index()] {
                    Val::Tile(t) => Val::Tile(t.iter().map(|&x| unary(*op, x)).collect()),
                    s => Val::Scalar(unary(*op, s.scalar())),
                },
                Instr::Binary { op, lhs, rhs } => match (&vals[lhs.index()], &vals[rhs.index()]) {
                    (Val::Tile(a), Val::Tile(b)) => {
                        Val::Tile(a.iter().zip(b).map(|(&x, &y)| binary(*op, x, y)).collect())
                    }
                    (a, b) => Val::Scalar(binary(*op, a.scalar(), b.scalar())),
                },
                Instr::Broadcast(s) => Val::Tile(vec![vals[s.index()].scalar(); n]),
                Instr::Reduce { op, arg } => Val::Scalar(reduce_row(
                    vals[arg.index()].tile(),
                    *op,
                    &plan.layout,
                    plan.tree,
                )),
                Instr::ReduceSumExp { arg, .. } => Val::Scalar(reduce_sum_exp_row(
                    vals[arg.index()].tile(),
                    &plan.layout,
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
        let results: Vec<Vec<(usize, Val)>> = (start..end).into_par_iter().map(eval_row).collect();
        for (k, stored) in results.into_iter().enumerate() {
            let row = start + k;
            for (slot, val) in stored {
                let out = outputs.get_mut(&program.outputs[slot].name).unwrap();
                match val {
                    Val::Tile(t) => {
                        for (i, x) in t.into_iter().enumerate() {
                            out.set(row * n + i, x);
                        }
                    }
                    Val::Scalar(s) => out.set(row, s),
                    Val::Index(_) | Val::Effect => unreachable!("verified store"),
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{poisoned_outputs, random_inputs};
    use lanefold_ir::{DType, Operator, OperatorOptions};
    use lanefold_plan::{plan, LayoutRequest, Problem, Target};

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
            let got = reduce_sum_exp_row(&tile, &layout, tree) as f64;
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
}
