use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// `rows x n`: rows of n elements each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Shape {
    pub rows: usize,
    pub n: usize,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ShapeError {
    #[error("malformed shape '{0}': expected ROWSxN, e.g. 64x4096")]
    Malformed(String),
    #[error("shape '{0}' has zero rows")]
    ZeroRows(String),
    #[error("shape '{0}' has zero-length rows")]
    ZeroLength(String),
    #[error("shape '{0}' is too large ({1} elements; at most 2^31 - 1)")]
    TooLarge(String, u128),
}

impl Shape {
    pub fn new(rows: usize, n: usize) -> Result<Shape, ShapeError> {
        let text = format!("{rows}x{n}");
        if rows == 0 {
            return Err(ShapeError::ZeroRows(text));
        }
        if n == 0 {
            return Err(ShapeError::ZeroLength(text));
        }
        let total = rows as u128 * n as u128;
        // Kernels index with 32-bit signed offsets.
        if total > i32::MAX as u128 {
            return Err(ShapeError::TooLarge(text, total));
        }
        Ok(Shape { rows, n })
    }

    pub fn elements(&self) -> usize {
        self.rows * self.n
    }
}

/// `count` shapes of no list, the same for the same seed: row lengths
/// log-uniform over `min_n..=max_n`, so odd and prime lengths come as
/// often as powers of two, a third rounded down to a multiple of 64 (as
/// model sizes are); row counts log-uniform over `1..=max_rows`, capped so
/// that a shape stays within 2^31 - 1 elements. For judging a rule over
/// ranges on shapes nobody chose (`lanefold compile-check --draw`).
pub fn drawn_shapes(
    seed: u64,
    count: usize,
    max_rows: usize,
    (min_n, max_n): (usize, usize),
) -> Vec<Shape> {
    // splitmix64: the counts the rules cite (`compile-check --draw`) come
    // back from their seeds alone.
    let mut state = seed;
    let mut unit = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) as f64 / u64::MAX as f64
    };
    let log_uniform = |u: f64, lo: usize, hi: usize| -> usize {
        let (lo, hi) = (lo.max(1) as f64, hi.max(lo.max(1)) as f64);
        ((lo.ln() + u * (hi.ln() - lo.ln())).exp().round() as usize).clamp(lo as usize, hi as usize)
    };
    (0..count)
        .map(|_| {
            let mut n = log_uniform(unit(), min_n, max_n);
            if unit() < 1.0 / 3.0 && n / 64 * 64 >= min_n.max(1) {
                n = n / 64 * 64;
            }
            let rows = log_uniform(unit(), 1, max_rows)
                .min(i32::MAX as usize / n)
                .max(1);
            Shape::new(rows, n).expect("a drawn shape is within the limits")
        })
        .collect()
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.rows, self.n)
    }
}

impl FromStr for Shape {
    type Err = ShapeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let malformed = || ShapeError::Malformed(s.to_string());
        let (r, n) = s.trim().split_once(['x', 'X']).ok_or_else(malformed)?;
        let r: usize = r.trim().parse().map_err(|_| malformed())?;
        let n: usize = n.trim().parse().map_err(|_| malformed())?;
        Shape::new(r, n).map_err(|e| match e {
            ShapeError::ZeroRows(_) => ShapeError::ZeroRows(s.to_string()),
            ShapeError::ZeroLength(_) => ShapeError::ZeroLength(s.to_string()),
            other => other,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_refuse() {
        assert_eq!(
            "64x4096".parse::<Shape>().unwrap(),
            Shape { rows: 64, n: 4096 }
        );
        assert!(matches!(
            "0x5".parse::<Shape>(),
            Err(ShapeError::ZeroRows(_))
        ));
        assert!(matches!(
            "4x0".parse::<Shape>(),
            Err(ShapeError::ZeroLength(_))
        ));
        assert!(matches!(
            "abc".parse::<Shape>(),
            Err(ShapeError::Malformed(_))
        ));
        assert!(matches!(
            "4x-1".parse::<Shape>(),
            Err(ShapeError::Malformed(_))
        ));
        assert!(matches!(
            "100000x100000".parse::<Shape>(),
            Err(ShapeError::TooLarge(..))
        ));
    }

    #[test]
    fn drawn_shapes_are_reproducible_and_keep_their_ranges() {
        let a = drawn_shapes(7, 500, 65536, (700, 200_000));
        assert_eq!(a, drawn_shapes(7, 500, 65536, (700, 200_000)));
        assert_ne!(a, drawn_shapes(8, 500, 65536, (700, 200_000)));
        assert!(a.iter().all(|s| (700..=200_000).contains(&s.n)));
        assert!(a
            .iter()
            .all(|s| s.rows <= 65536 && s.elements() <= i32::MAX as usize));
        // Lengths of every kind: odd ones, multiples of 64, and both ends
        // of the range by decade.
        assert!(a.iter().any(|s| s.n % 2 == 1));
        assert!(a.iter().filter(|s| s.n % 64 == 0).count() > 100);
        assert!(a.iter().any(|s| s.n < 2000) && a.iter().any(|s| s.n > 100_000));
        assert!(a.iter().any(|s| s.rows < 16) && a.iter().any(|s| s.rows > 8192));
    }
}
