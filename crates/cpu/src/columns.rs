//! dweight and dbias of the norms: sums over rows, per column, in one
//! fixed order. Rows are cut into groups of [`COLUMN_GROUP_ROWS`]; each
//! group's partial sum runs over its rows in order, and the partials are
//! added in group order. The order depends on the row count alone, never
//! on threads or on how the groups are scheduled, so results are
//! bit-identical however the work is split (a split at group boundaries
//! included). Per-row statistics are f32 sums in element order.

use crate::data::{Buffers, DataError, Tensor};
use crate::reference::{Expected, Reference};
pub use lanefold_ir::COLUMN_GROUP_ROWS;
use lanefold_ir::{DType, Operator, LAYERNORM_EPS, RMSNORM_EPS};
use rayon::prelude::*;

/// Which column gradients: rmsnorm's dweight, or layernorm's dweight and
/// dbias (of x, or of h for residual_layernorm).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColumnGrads {
    Rmsnorm,
    Layernorm,
}

impl ColumnGrads {
    /// The column gradients of a backward operator; None where it has none.
    pub fn of(op: Operator) -> Option<(ColumnGrads, &'static str)> {
        match op {
            Operator::RmsnormBackward => Some((ColumnGrads::Rmsnorm, "x")),
            Operator::LayernormBackward => Some((ColumnGrads::Layernorm, "x")),
            Operator::ResidualLayernormBackward => Some((ColumnGrads::Layernorm, "h")),
            _ => None,
        }
    }

    /// The outputs, in order.
    pub fn outputs(self) -> &'static [&'static str] {
        match self {
            ColumnGrads::Rmsnorm => &["dweight"],
            ColumnGrads::Layernorm => &["dweight", "dbias"],
        }
    }

    pub fn default_eps(self) -> f32 {
        match self {
            ColumnGrads::Rmsnorm => RMSNORM_EPS,
            ColumnGrads::Layernorm => LAYERNORM_EPS,
        }
    }
}

/// The rows (`x` or `h`, and `dy`) of a column-gradient problem, checked.
pub struct ColumnInputs<'a> {
    pub x: &'a Tensor,
    pub dy: &'a Tensor,
    pub rows: usize,
    pub n: usize,
}

impl<'a> ColumnInputs<'a> {
    pub fn new(
        inputs: &'a Buffers,
        x_name: &str,
        rows: usize,
        n: usize,
    ) -> Result<ColumnInputs<'a>, DataError> {
        let get = |name: &str| -> Result<&'a Tensor, DataError> {
            let t = inputs
                .get(name)
                .ok_or_else(|| DataError::Missing(name.to_string()))?;
            if t.len() != rows * n {
                return Err(DataError::Length {
                    name: name.to_string(),
                    got: t.len(),
                    expected: rows * n,
                    what: format!("row buffer of shape {rows}x{n}"),
                });
            }
            Ok(t)
        };
        let (x, dy) = (get(x_name)?, get("dy")?);
        if x.dtype_name() != dy.dtype_name() || x.dtype_name() == "i64" {
            return Err(DataError::DType {
                name: "dy".into(),
                got: dy.dtype_name().into(),
                expected: x.dtype_name().into(),
            });
        }
        Ok(ColumnInputs { x, dy, rows, n })
    }
}

/// Row `r`'s (shift, rstd) in f32, sums in element order: xhat = (x -
/// shift) * rstd.
fn row_stats(kind: ColumnGrads, inp: &ColumnInputs, r: usize, eps: f32) -> (f32, f32) {
    let n = inp.n;
    let x = |i: usize| inp.x.get(r * n + i);
    match kind {
        ColumnGrads::Rmsnorm => {
            let ss = (0..n).fold(0.0f32, |a, i| a + x(i) * x(i));
            (0.0, 1.0 / (ss / n as f32 + eps).sqrt())
        }
        ColumnGrads::Layernorm => {
            let mean = (0..n).fold(0.0f32, |a, i| a + x(i)) / n as f32;
            let ss = (0..n).fold(0.0f32, |a, i| a + (x(i) - mean) * (x(i) - mean));
            (mean, 1.0 / (ss / n as f32 + eps).sqrt())
        }
    }
}

/// First pass: one partial per output per group, for the groups
/// `groups` (group g holds rows g*COLUMN_GROUP_ROWS..), each the sum over
/// the group's rows in row order. Partials are f32, `[output][group][column]`
/// flattened per output.
pub fn column_partials(
    kind: ColumnGrads,
    inp: &ColumnInputs,
    groups: std::ops::Range<usize>,
    eps: f32,
) -> Vec<Vec<f32>> {
    let n = inp.n;
    let per_group: Vec<Vec<Vec<f32>>> = groups
        .into_par_iter()
        .map(|g| {
            let rows = g * COLUMN_GROUP_ROWS..((g + 1) * COLUMN_GROUP_ROWS).min(inp.rows);
            let mut dw = vec![0.0f32; n];
            let mut db = vec![0.0f32; n];
            for r in rows {
                let (shift, rstd) = row_stats(kind, inp, r, eps);
                for j in 0..n {
                    let dy = inp.dy.get(r * n + j);
                    let xhat = (inp.x.get(r * n + j) - shift) * rstd;
                    dw[j] += dy * xhat;
                    db[j] += dy;
                }
            }
            match kind {
                ColumnGrads::Rmsnorm => vec![dw],
                ColumnGrads::Layernorm => vec![dw, db],
            }
        })
        .collect();
    (0..kind.outputs().len())
        .map(|o| {
            per_group
                .iter()
                .flat_map(|g| g[o].iter().copied())
                .collect()
        })
        .collect()
}

/// Second pass: each output's partials (groups in order) summed per
/// column in group order, rounded to `dtype`.
pub fn combine_partials(
    kind: ColumnGrads,
    partials: &[Vec<f32>],
    n: usize,
    dtype: DType,
) -> Buffers {
    kind.outputs()
        .iter()
        .zip(partials)
        .map(|(name, p)| {
            let sums: Vec<f32> = (0..n)
                .map(|j| p.iter().skip(j).step_by(n).fold(0.0f32, |a, &v| a + v))
                .collect();
            (name.to_string(), Tensor::from_f32(dtype, &sums))
        })
        .collect()
}

/// Number of row groups of `rows` rows.
pub fn column_groups(rows: usize) -> usize {
    rows.div_ceil(COLUMN_GROUP_ROWS)
}

/// dweight (and dbias) of every column: both passes.
pub fn column_grads(
    op: Operator,
    inputs: &Buffers,
    rows: usize,
    n: usize,
    eps: f32,
    dtype: DType,
) -> Result<Buffers, DataError> {
    let (kind, x_name) =
        ColumnGrads::of(op).ok_or_else(|| DataError::NoColumnGradients(op.to_string()))?;
    let inp = ColumnInputs::new(inputs, x_name, rows, n)?;
    let partials = column_partials(kind, &inp, 0..column_groups(rows), eps);
    Ok(combine_partials(kind, &partials, n, dtype))
}

/// The float64 oracle of [`column_grads`] with the library's eps: plain
/// per-row statistics and sums; each column's scale is the sum of its
/// terms' magnitudes.
pub fn column_grads_reference(
    op: Operator,
    inputs: &Buffers,
    rows: usize,
    n: usize,
) -> Option<Reference> {
    let (kind, x_name) = ColumnGrads::of(op)?;
    let (x, dy) = (inputs.get(x_name)?, inputs.get("dy")?);
    let eps = kind.default_eps() as f64;
    let mut dw = vec![0.0f64; n];
    let mut db = vec![0.0f64; n];
    let mut dw_scale = vec![0.0f64; n];
    let mut db_scale = vec![0.0f64; n];
    for r in 0..rows {
        let row: Vec<f64> = (0..n).map(|i| x.get(r * n + i) as f64).collect();
        let mean = match kind {
            ColumnGrads::Rmsnorm => 0.0,
            ColumnGrads::Layernorm => row.iter().sum::<f64>() / n as f64,
        };
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
        let rstd = 1.0 / (var + eps).sqrt();
        for j in 0..n {
            let g = dy.get(r * n + j) as f64;
            let t = g * (row[j] - mean) * rstd;
            dw[j] += t;
            dw_scale[j] += t.abs();
            db[j] += g;
            db_scale[j] += g.abs();
        }
    }
    let mut out = Reference::new();
    out.insert(
        "dweight".into(),
        Expected {
            values: dw,
            scale: Some(dw_scale),
        },
    );
    if kind == ColumnGrads::Layernorm {
        out.insert(
            "dbias".into(),
            Expected {
                values: db,
                scale: Some(db_scale),
            },
        );
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::random_inputs;
    use crate::validate;
    use lanefold_ir::OperatorOptions;
    use lanefold_plan::Problem;

    const OPS: [Operator; 3] = [
        Operator::RmsnormBackward,
        Operator::LayernormBackward,
        Operator::ResidualLayernormBackward,
    ];

    fn inputs(op: Operator, dtype: DType, shape: &str) -> (Buffers, usize, usize) {
        let p = Problem::operator(
            op,
            OperatorOptions::default(),
            dtype,
            shape.parse().unwrap(),
        );
        (random_inputs(&p, 21), p.shape.rows, p.shape.n)
    }

    #[test]
    fn column_gradients_match_the_float64_oracle() {
        for op in OPS {
            for dtype in [DType::F32, DType::Bf16, DType::F16] {
                for shape in ["1x7", "100x33", "257x129"] {
                    let (inp, rows, n) = inputs(op, dtype, shape);
                    let eps = ColumnGrads::of(op).unwrap().0.default_eps();
                    let got = column_grads(op, &inp, rows, n, eps, dtype).unwrap();
                    let want = column_grads_reference(op, &inp, rows, n).unwrap();
                    let v = validate(dtype, &got, &want);
                    assert!(v.pass, "{op} {dtype} {shape}: {:?}", v.outputs);
                    assert_eq!(got.len(), want.len());
                }
            }
        }
        // A wrong column is caught.
        let (inp, rows, n) = inputs(Operator::LayernormBackward, DType::F32, "100x33");
        let mut got = column_grads(
            Operator::LayernormBackward,
            &inp,
            rows,
            n,
            LAYERNORM_EPS,
            DType::F32,
        )
        .unwrap();
        let want = column_grads_reference(Operator::LayernormBackward, &inp, rows, n).unwrap();
        let db = got.get_mut("dbias").unwrap();
        let v = db.get(5);
        db.set(5, v * 1.01 + 0.01);
        assert!(!validate(DType::F32, &got, &want).pass);
    }

    /// The same bits on one thread and on four, and when the groups are
    /// computed in two separate batches split at a group boundary.
    #[test]
    fn column_gradients_are_bit_identical_however_the_rows_are_split() {
        for op in OPS {
            let (inp, rows, n) = inputs(op, DType::F32, "200x65");
            let (kind, x) = ColumnGrads::of(op).unwrap();
            let eps = kind.default_eps();
            let on = |threads| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap()
                    .install(|| column_grads(op, &inp, rows, n, eps, DType::F32).unwrap())
            };
            let one = on(1);
            assert!(crate::data::same_bits(&one, &on(4)), "{op}");
            let ci = ColumnInputs::new(&inp, x, rows, n).unwrap();
            let groups = column_groups(rows);
            assert_eq!(groups, 7);
            let (a, b) = (
                column_partials(kind, &ci, 0..3, eps),
                column_partials(kind, &ci, 3..groups, eps),
            );
            let joined: Vec<Vec<f32>> = a
                .iter()
                .zip(&b)
                .map(|(a, b)| a.iter().chain(b).copied().collect())
                .collect();
            let split = combine_partials(kind, &joined, n, DType::F32);
            assert!(crate::data::same_bits(&one, &split), "{op}");
            // The order is the defined one: group partials, then groups.
            let dw = &one["dweight"];
            let j = 17;
            let mut total = 0.0f32;
            for g in 0..groups {
                let mut part = 0.0f32;
                for r in g * COLUMN_GROUP_ROWS..((g + 1) * COLUMN_GROUP_ROWS).min(rows) {
                    let (shift, rstd) = row_stats(kind, &ci, r, eps);
                    part += ci.dy.get(r * n + j) * ((ci.x.get(r * n + j) - shift) * rstd);
                }
                total += part;
            }
            assert_eq!(dw.get(j).to_bits(), total.to_bits(), "{op}");
        }
    }

    #[test]
    fn bad_column_inputs_are_errors() {
        let (mut inp, rows, n) = inputs(Operator::RmsnormBackward, DType::F32, "4x8");
        assert!(matches!(
            column_grads(Operator::SoftmaxBackward, &inp, rows, n, 1e-6, DType::F32),
            Err(DataError::NoColumnGradients(_))
        ));
        assert!(matches!(
            column_grads(
                Operator::RmsnormBackward,
                &inp,
                rows + 1,
                n,
                1e-6,
                DType::F32
            ),
            Err(DataError::Length { .. })
        ));
        inp.remove("dy");
        assert!(matches!(
            column_grads(Operator::RmsnormBackward, &inp, rows, n, 1e-6, DType::F32),
            Err(DataError::Missing(_))
        ));
    }
}
