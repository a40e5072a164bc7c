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
}
