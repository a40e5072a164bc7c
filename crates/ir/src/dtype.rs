use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Storage dtype of row and column buffers. Arithmetic is always f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F32,
    Bf16,
    F16,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unsupported dtype '{0}' (expected f32, bf16 or f16)")]
pub struct DTypeError(pub String);

impl DType {
    pub const ALL: [DType; 3] = [DType::F32, DType::Bf16, DType::F16];

    pub fn size_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::Bf16 | DType::F16 => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::Bf16 => "bf16",
            DType::F16 => "f16",
        }
    }

    /// Round an f32 to this storage type and back (round to nearest even),
    /// the same conversion the CUDA intrinsics `__float2bfloat16_rn` and
    /// `__float2half_rn` perform.
    #[inline]
    pub fn round(self, x: f32) -> f32 {
        match self {
            DType::F32 => x,
            DType::Bf16 => half::bf16::from_f32(x).to_f32(),
            DType::F16 => half::f16::from_f32(x).to_f32(),
        }
    }

    /// The largest finite value of the storage type.
    pub fn max_finite(self) -> f64 {
        match self {
            DType::F32 => f32::MAX as f64,
            DType::Bf16 => half::bf16::MAX.to_f64(),
            DType::F16 => half::f16::MAX.to_f64(),
        }
    }

    /// Normwise relative error allowed when validating against float64.
    pub fn tolerance(self) -> f64 {
        match self {
            DType::F32 => 1e-5,
            DType::F16 => 2e-3,
            DType::Bf16 => 1e-2,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = DTypeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "float32" => Ok(DType::F32),
            "bf16" | "bfloat16" => Ok(DType::Bf16),
            "f16" | "float16" | "half" => Ok(DType::F16),
            _ => Err(DTypeError(s.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_refuses_f64_with_its_name() {
        let err = "f64".parse::<DType>().unwrap_err();
        assert!(err.to_string().contains("'f64'"));
    }

    #[test]
    fn rounding_is_nearest_even() {
        // 1 + 2^-8 lies exactly between two bf16 values: ties go to even (1.0).
        assert_eq!(DType::Bf16.round(1.0 + 1.0 / 256.0), 1.0);
        assert_eq!(DType::F16.round(1.0 + 1.0 / 4096.0), 1.0);
        assert_eq!(DType::F32.round(0.1), 0.1);
    }
}
