//! Host tensors named by the program's buffers.

use half::{bf16, f16};
use lanefold_ir::{BufferKind, DType};
use lanefold_plan::Problem;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq)]
pub enum Tensor {
    F32(Vec<f32>),
    Bf16(Vec<bf16>),
    F16(Vec<f16>),
    I64(Vec<i64>),
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DataError {
    #[error("missing input '{0}'")]
    Missing(String),
    #[error("'{name}' has {got} elements, expected {expected} ({what})")]
    Length {
        name: String,
        got: usize,
        expected: usize,
        what: String,
    },
    #[error("'{name}' has dtype {got}, expected {expected}")]
    DType {
        name: String,
        got: String,
        expected: String,
    },
    #[error("'{name}': target index {value} at row {row} is out of range [0, {n}) and is not the ignore index -100")]
    TargetOutOfRange {
        name: String,
        row: usize,
        value: i64,
        n: usize,
    },
    #[error("unexpected buffer '{0}': the program declares no such input")]
    Unexpected(String),
    #[error("'{0}' has no column gradients (dweight, dbias): rmsnorm_backward, layernorm_backward and residual_layernorm_backward have")]
    NoColumnGradients(String),
}

impl Tensor {
    /// Same dtype, length and bits, element by element (in parallel:
    /// selftests compare outputs of tens of millions of elements).
    pub fn same_bits(&self, other: &Tensor) -> bool {
        fn eq<T: Sync, B: PartialEq>(a: &[T], b: &[T], bits: impl Fn(&T) -> B + Sync) -> bool {
            a.len() == b.len()
                && a.par_chunks(1 << 16)
                    .zip(b.par_chunks(1 << 16))
                    .all(|(x, y)| x.iter().zip(y).all(|(p, q)| bits(p) == bits(q)))
        }
        match (self, other) {
            (Tensor::F32(a), Tensor::F32(b)) => eq(a, b, |x| x.to_bits()),
            (Tensor::Bf16(a), Tensor::Bf16(b)) => eq(a, b, |x| x.to_bits()),
            (Tensor::F16(a), Tensor::F16(b)) => eq(a, b, |x| x.to_bits()),
            (Tensor::I64(a), Tensor::I64(b)) => eq(a, b, |x| *x),
            _ => false,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Tensor::F32(v) => v.len(),
            Tensor::Bf16(v) => v.len(),
            Tensor::F16(v) => v.len(),
            Tensor::I64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The rows `keep` (in that order) of a tensor of rows `width` long.
    pub fn select_rows(&self, width: usize, keep: &[usize]) -> Tensor {
        fn pick<T: Copy>(v: &[T], width: usize, keep: &[usize]) -> Vec<T> {
            keep.iter()
                .flat_map(|&r| v[r * width..(r + 1) * width].iter().copied())
                .collect()
        }
        match self {
            Tensor::F32(v) => Tensor::F32(pick(v, width, keep)),
            Tensor::Bf16(v) => Tensor::Bf16(pick(v, width, keep)),
            Tensor::F16(v) => Tensor::F16(pick(v, width, keep)),
            Tensor::I64(v) => Tensor::I64(pick(v, width, keep)),
        }
    }

    pub fn dtype_name(&self) -> &'static str {
        match self {
            Tensor::F32(_) => "f32",
            Tensor::Bf16(_) => "bf16",
            Tensor::F16(_) => "f16",
            Tensor::I64(_) => "i64",
        }
    }

    /// Element i widened to f32 (indices converted; exact below 2^24).
    #[inline]
    pub fn get(&self, i: usize) -> f32 {
        match self {
            Tensor::F32(v) => v[i],
            Tensor::Bf16(v) => v[i].to_f32(),
            Tensor::F16(v) => v[i].to_f32(),
            Tensor::I64(v) => v[i] as f32,
        }
    }

    #[inline]
    pub fn index(&self, i: usize) -> i64 {
        match self {
            Tensor::I64(v) => v[i],
            other => other.get(i) as i64,
        }
    }

    pub fn to_f64(&self) -> Vec<f64> {
        (0..self.len()).map(|i| self.get(i) as f64).collect()
    }

    /// A tensor of `len` elements of `dtype`, every one NaN: any element a
    /// kernel fails to write is caught by validation.
    pub fn poisoned(dtype: DType, len: usize) -> Tensor {
        // Filled in parallel: outputs of long rows run to gigabytes.
        fn nans<T: Copy + Send + Sync>(nan: T, len: usize) -> Vec<T> {
            let mut v = Vec::with_capacity(len);
            (0..len)
                .into_par_iter()
                .map(|_| nan)
                .collect_into_vec(&mut v);
            v
        }
        match dtype {
            DType::F32 => Tensor::F32(nans(f32::NAN, len)),
            DType::Bf16 => Tensor::Bf16(nans(bf16::NAN, len)),
            DType::F16 => Tensor::F16(nans(f16::NAN, len)),
        }
    }

    pub fn from_f32(dtype: DType, values: &[f32]) -> Tensor {
        match dtype {
            DType::F32 => Tensor::F32(values.to_vec()),
            DType::Bf16 => Tensor::Bf16(values.iter().map(|&x| bf16::from_f32(x)).collect()),
            DType::F16 => Tensor::F16(values.iter().map(|&x| f16::from_f32(x)).collect()),
        }
    }

    /// Elements `start..start + len` widened to f32, as [`Self::get`] widens
    /// each (one dtype dispatch for the slice).
    pub fn get_range(&self, start: usize, len: usize) -> Vec<f32> {
        let range = start..start + len;
        match self {
            Tensor::F32(v) => v[range].to_vec(),
            Tensor::Bf16(v) => v[range].iter().map(|x| x.to_f32()).collect(),
            Tensor::F16(v) => v[range].iter().map(|x| x.to_f32()).collect(),
            Tensor::I64(v) => v[range].iter().map(|&x| x as f32).collect(),
        }
    }

    /// Store f32 results at `start..`, each rounded as [`Self::set`] rounds.
    pub fn set_range(&mut self, start: usize, values: &[f32]) {
        let range = start..start + values.len();
        match self {
            Tensor::F32(v) => v[range].copy_from_slice(values),
            Tensor::Bf16(v) => v[range]
                .iter_mut()
                .zip(values)
                .for_each(|(o, &x)| *o = bf16::from_f32(x)),
            Tensor::F16(v) => v[range]
                .iter_mut()
                .zip(values)
                .for_each(|(o, &x)| *o = f16::from_f32(x)),
            Tensor::I64(v) => v[range]
                .iter_mut()
                .zip(values)
                .for_each(|(o, &x)| *o = x as i64),
        }
    }

    /// Store an f32 result with the storage dtype's rounding.
    #[inline]
    pub fn set(&mut self, i: usize, x: f32) {
        match self {
            Tensor::F32(v) => v[i] = x,
            Tensor::Bf16(v) => v[i] = bf16::from_f32(x),
            Tensor::F16(v) => v[i] = f16::from_f32(x),
            Tensor::I64(v) => v[i] = x as i64,
        }
    }

    /// Raw little-endian bytes (for device upload).
    pub fn as_bytes(&self) -> Vec<u8> {
        match self {
            Tensor::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Tensor::Bf16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Tensor::F16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Tensor::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    /// Replace the contents from raw little-endian bytes of the same layout.
    pub fn copy_from_bytes(&mut self, bytes: &[u8]) {
        match self {
            Tensor::F32(v) => {
                for (x, c) in v.iter_mut().zip(bytes.chunks_exact(4)) {
                    *x = f32::from_le_bytes(c.try_into().unwrap());
                }
            }
            Tensor::Bf16(v) => {
                for (x, c) in v.iter_mut().zip(bytes.chunks_exact(2)) {
                    *x = bf16::from_le_bytes(c.try_into().unwrap());
                }
            }
            Tensor::F16(v) => {
                for (x, c) in v.iter_mut().zip(bytes.chunks_exact(2)) {
                    *x = f16::from_le_bytes(c.try_into().unwrap());
                }
            }
            Tensor::I64(v) => {
                for (x, c) in v.iter_mut().zip(bytes.chunks_exact(8)) {
                    *x = i64::from_le_bytes(c.try_into().unwrap());
                }
            }
        }
    }

    pub fn size_bytes(&self) -> usize {
        match self {
            Tensor::F32(v) => v.len() * 4,
            Tensor::Bf16(v) => v.len() * 2,
            Tensor::F16(v) => v.len() * 2,
            Tensor::I64(v) => v.len() * 8,
        }
    }
}

/// Named tensors: the program's inputs or outputs.
pub type Buffers = BTreeMap<String, Tensor>;

/// The same names, each with the same dtype, length and bits (NaN
/// payloads and signed zeros included, unlike `==` on floats).
pub fn same_bits(a: &Buffers, b: &Buffers) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|((na, ta), (nb, tb))| na == nb && ta.same_bits(tb))
}

/// Elements a buffer of `kind` holds for the problem.
pub fn expected_len(kind: BufferKind, rows: usize, n: usize) -> usize {
    match kind {
        BufferKind::Row => rows * n,
        BufferKind::Column => n,
        BufferKind::RowIndex | BufferKind::RowScalar | BufferKind::RowScalarF32 => rows,
    }
}

/// Seeded inputs: values uniform in [-2, 2) (rounded to the storage dtype),
/// weights near 1, targets in range with about one row in eight ignored.
/// A saved log-sum-exp `lse` (cross_entropy_backward's) is not drawn: it
/// is each row's true `log(sum(exp(x)))` of the seeded, stored `x`, in f64
/// rounded once to f32, so the inputs are those a forward would have
/// saved for them (a drawn one would give gradients no forward can).
pub fn random_inputs(problem: &Problem, seed: u64) -> Buffers {
    let (rows, n) = (problem.shape.rows, problem.shape.n);
    let mut out = Buffers::new();
    for (k, decl) in problem.program.inputs.iter().enumerate() {
        let len = expected_len(decl.kind, rows, n);
        let stream = seed
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(k as u64);
        let tensor = match decl.kind {
            BufferKind::RowIndex => {
                let mut rng = ChaCha8Rng::seed_from_u64(stream);
                Tensor::I64(
                    (0..len)
                        .map(|_| {
                            if rng.random_range(0..8) == 0 {
                                lanefold_ir::IGNORE_INDEX
                            } else {
                                rng.random_range(0..n as i64)
                            }
                        })
                        .collect(),
                )
            }
            kind => {
                let (lo, hi) = if kind == BufferKind::Column {
                    (0.5f32, 1.5f32)
                } else {
                    (-2.0, 2.0)
                };
                // Parallel in blocks, each with its own seeded stream.
                const BLOCK: usize = 1 << 16;
                let mut values = vec![0f32; len];
                values
                    .par_chunks_mut(BLOCK)
                    .enumerate()
                    .for_each(|(b, chunk)| {
                        let mut rng = ChaCha8Rng::seed_from_u64(stream ^ ((b as u64) << 32));
                        for x in chunk {
                            *x = rng.random_range(lo..hi);
                        }
                    });
                Tensor::from_f32(problem.dtype, &values)
            }
        };
        out.insert(decl.name.clone(), tensor);
    }
    if let Some(lse) = saved_lse(problem, &out) {
        out.insert("lse".into(), lse);
    }
    out
}

/// The per-row log-sum-exp of `inputs["x"]`, in f64 from the stored values
/// and rounded once to f32, for a program with an f32 per-row input
/// `lse`; None otherwise. A fully -inf row gives -inf, a row holding NaN
/// or +inf NaN or +inf: what the forward computes for such rows.
pub fn saved_lse(problem: &Problem, inputs: &Buffers) -> Option<Tensor> {
    let decl = problem.program.input("lse")?;
    if decl.kind != BufferKind::RowScalarF32 {
        return None;
    }
    let x = inputs.get("x")?;
    let (rows, n) = (problem.shape.rows, problem.shape.n);
    let lse = (0..rows)
        .into_par_iter()
        .map(|r| {
            let row = (0..n).map(|i| x.get(r * n + i) as f64);
            let m = row.clone().fold(f64::NEG_INFINITY, f64::max);
            if !m.is_finite() {
                // All -inf: -inf; +inf: +inf (a NaN in the row is below).
                return if row.clone().any(f64::is_nan) {
                    f32::NAN
                } else {
                    m as f32
                };
            }
            let s: f64 = row.map(|v| (v - m).exp()).sum();
            (s.ln() + m) as f32
        })
        .collect();
    Some(Tensor::F32(lse))
}

/// NaN-filled outputs in the storage dtype.
pub fn poisoned_outputs(problem: &Problem) -> Buffers {
    let (rows, n) = (problem.shape.rows, problem.shape.n);
    problem
        .program
        .outputs
        .iter()
        .map(|d| {
            (
                d.name.clone(),
                Tensor::poisoned(
                    d.kind.float_dtype(problem.dtype),
                    expected_len(d.kind, rows, n),
                ),
            )
        })
        .collect()
}

/// Check names, lengths, dtypes and target ranges before anything runs.
pub fn check_inputs(problem: &Problem, inputs: &Buffers) -> Result<(), DataError> {
    let (rows, n) = (problem.shape.rows, problem.shape.n);
    for name in inputs.keys() {
        if problem.program.input(name).is_none() {
            return Err(DataError::Unexpected(name.clone()));
        }
    }
    for decl in &problem.program.inputs {
        let t = inputs
            .get(&decl.name)
            .ok_or_else(|| DataError::Missing(decl.name.clone()))?;
        let expected = expected_len(decl.kind, rows, n);
        if t.len() != expected {
            return Err(DataError::Length {
                name: decl.name.clone(),
                got: t.len(),
                expected,
                what: format!("{:?} buffer of shape {}", decl.kind, problem.shape).to_lowercase(),
            });
        }
        let want = if decl.kind == BufferKind::RowIndex {
            "i64"
        } else {
            decl.kind.float_dtype(problem.dtype).name()
        };
        if t.dtype_name() != want {
            return Err(DataError::DType {
                name: decl.name.clone(),
                got: t.dtype_name().into(),
                expected: want.into(),
            });
        }
        if let Tensor::I64(v) = t {
            for (row, &value) in v.iter().enumerate() {
                if value != lanefold_ir::IGNORE_INDEX && !(0..n as i64).contains(&value) {
                    return Err(DataError::TargetOutOfRange {
                        name: decl.name.clone(),
                        row,
                        value,
                        n,
                    });
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod same_bits_tests {
    use super::*;

    #[test]
    fn same_bits_tells_signed_zeros_and_dtypes_apart_and_matches_nan_with_itself() {
        let t = |v: Vec<f32>| Tensor::F32(v);
        let nan = f32::NAN;
        assert!(t(vec![1.0, nan]).same_bits(&t(vec![1.0, nan])));
        // `==` says equal, the bits do not.
        assert_eq!(t(vec![0.0]), t(vec![-0.0]));
        assert!(!t(vec![0.0]).same_bits(&t(vec![-0.0])));
        assert!(!t(vec![1.0]).same_bits(&t(vec![1.0, 1.0])));
        let one_bf16 = Tensor::Bf16(vec![bf16::from_f32(1.0)]);
        assert!(!t(vec![1.0]).same_bits(&one_bf16));
        // A difference deep in a long tensor (past the first parallel chunk).
        let long: Vec<f32> = (0..200_000).map(|i| i as f32).collect();
        let mut changed = long.clone();
        changed[150_001] = f32::from_bits(changed[150_001].to_bits() ^ 1);
        assert!(!t(long.clone()).same_bits(&t(changed)));
        let named = |name: &str, v: Tensor| Buffers::from([(name.to_string(), v)]);
        assert!(same_bits(
            &named("y", t(long.clone())),
            &named("y", t(long.clone()))
        ));
        assert!(!same_bits(
            &named("y", t(long.clone())),
            &named("h", t(long))
        ));
    }
}
