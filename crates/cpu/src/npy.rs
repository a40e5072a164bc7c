//! `.npy` files in and out. Files are data, never code: object (pickled)
//! arrays are refused, and every array is checked against the program's
//! buffer before use. bf16 travels as its raw bits in `<u2`/`<i2` arrays
//! (`tensor.view(torch.int16).numpy()`), since NumPy has no bf16 dtype.

use crate::data::Tensor;
use half::{bf16, f16};
use lanefold_ir::DType;
use npyz::WriterBuilder;
use std::io::Write;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    // Not `source`: the message already holds the OS error, and a source
    // would print it a second time in an error chain.
    #[error("{path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("{path}: pickled (object) arrays are refused; save plain numeric data")]
    Pickled { path: String },
    #[error("{path}: dtype {got} does not fit {wanted}")]
    DType {
        path: String,
        got: String,
        wanted: String,
    },
    #[error("{path}: shape {got:?}, expected {expected:?}")]
    Shape {
        path: String,
        got: Vec<u64>,
        expected: Vec<u64>,
    },
    #[error("{path}: Fortran-order arrays are not supported")]
    FortranOrder { path: String },
}

/// What a buffer holds: floats in a storage dtype, or i64 indices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Element {
    Float(DType),
    Index,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> NpyError + '_ {
    move |error| NpyError::Io {
        path: path.display().to_string(),
        error,
    }
}

/// Read `path` as `element` with exactly `shape` (1-D arrays of the same
/// element count are accepted for per-row and per-column buffers).
pub fn read(path: &Path, element: Element, shape: &[u64]) -> Result<Tensor, NpyError> {
    let p = || path.display().to_string();
    let bytes = std::fs::read(path).map_err(io(path))?;
    let file = npyz::NpyFile::new(&bytes[..]).map_err(io(path))?;
    if file.uses_pickled_array() {
        return Err(NpyError::Pickled { path: p() });
    }
    if file.order() == npyz::Order::Fortran && file.shape().len() > 1 {
        return Err(NpyError::FortranOrder { path: p() });
    }
    let got_shape = file.shape().to_vec();
    let count: u64 = shape.iter().product();
    let shape_ok =
        got_shape == shape || (got_shape.len() == 1 && got_shape[0] == count && shape.len() == 1);
    if !shape_ok {
        return Err(NpyError::Shape {
            path: p(),
            got: got_shape,
            expected: shape.to_vec(),
        });
    }
    let type_str = match file.dtype() {
        npyz::DType::Plain(t) => t.to_string(),
        other => format!("{other:?}"),
    };
    let bad = |wanted: &str| NpyError::DType {
        path: p(),
        got: type_str.clone(),
        wanted: wanted.to_string(),
    };
    let t = match (element, type_str.as_str()) {
        (Element::Float(DType::F32), "<f4") => {
            Tensor::F32(file.into_vec::<f32>().map_err(io(path))?)
        }
        (Element::Float(DType::F32), _) => return Err(bad("f32 (<f4)")),
        (Element::Float(DType::F16), "<f2") => {
            Tensor::F16(file.into_vec::<f16>().map_err(io(path))?)
        }
        (Element::Float(DType::F16), _) => return Err(bad("f16 (<f2)")),
        (Element::Float(DType::Bf16), "<u2") => Tensor::Bf16(
            file.into_vec::<u16>()
                .map_err(io(path))?
                .into_iter()
                .map(bf16::from_bits)
                .collect(),
        ),
        (Element::Float(DType::Bf16), "<i2") => Tensor::Bf16(
            file.into_vec::<i16>()
                .map_err(io(path))?
                .into_iter()
                .map(|b| bf16::from_bits(b as u16))
                .collect(),
        ),
        (Element::Float(DType::Bf16), _) => return Err(bad("bf16 as raw bits (<u2 or <i2)")),
        (Element::Index, "<i8") => Tensor::I64(file.into_vec::<i64>().map_err(io(path))?),
        (Element::Index, "<i4") => Tensor::I64(
            file.into_vec::<i32>()
                .map_err(io(path))?
                .into_iter()
                .map(i64::from)
                .collect(),
        ),
        (Element::Index, _) => return Err(bad("integer indices (<i8 or <i4)")),
    };
    Ok(t)
}

/// Write `tensor` with `shape`, atomically (temp file, then rename).
pub fn write(path: &Path, tensor: &Tensor, shape: &[u64]) -> Result<(), NpyError> {
    let buf = encode(path, tensor, shape)?;
    write_atomically(path, &buf).map_err(io(path))
}

/// Write a scratch file that dies with the run (inputs handed to the
/// PyTorch peer): no temp file, no fsync. Syncing a 268 MB scratch input
/// took about 3 s on a 2-core machine, per case and round.
pub fn write_scratch(path: &Path, tensor: &Tensor, shape: &[u64]) -> Result<(), NpyError> {
    let buf = encode(path, tensor, shape)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io(path))?;
    }
    std::fs::write(path, &buf).map_err(io(path))
}

fn encode(path: &Path, tensor: &Tensor, shape: &[u64]) -> Result<Vec<u8>, NpyError> {
    let mut buf = vec![];
    {
        let result = match tensor {
            Tensor::F32(v) => write_array(&mut buf, shape, v.iter().copied()),
            Tensor::F16(v) => write_array(&mut buf, shape, v.iter().copied()),
            Tensor::Bf16(v) => write_array(&mut buf, shape, v.iter().map(|x| x.to_bits())),
            Tensor::I64(v) => write_array(&mut buf, shape, v.iter().copied()),
        };
        result.map_err(io(path))?;
    }
    Ok(buf)
}

fn write_array<T: npyz::AutoSerialize>(
    buf: &mut Vec<u8>,
    shape: &[u64],
    values: impl Iterator<Item = T>,
) -> std::io::Result<()> {
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(shape)
        .writer(buf)
        .begin_nd()?;
    w.extend(values)?;
    w.finish()
}

/// Write a file so that a reader sees either the old or the new contents.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("out"),
        std::process::id()
    ));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("lanefold-npy-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d.join(name)
    }

    #[test]
    fn round_trip_every_element_kind() {
        let cases = [
            (
                Element::Float(DType::F32),
                Tensor::F32(vec![1.5, -2.0, 3.25, 0.0, 7.0, 8.0]),
            ),
            (
                Element::Float(DType::F16),
                Tensor::from_f32(DType::F16, &[1.5, -2.0, 3.25, 0.0, 7.0, 8.0]),
            ),
            (
                Element::Float(DType::Bf16),
                Tensor::from_f32(DType::Bf16, &[1.5, -2.0, 3.25, 0.0, 7.0, 8.0]),
            ),
            (Element::Index, Tensor::I64(vec![0, 5, -100, 2, 1, 3])),
        ];
        for (i, (element, t)) in cases.into_iter().enumerate() {
            let path = tmp(&format!("rt{i}.npy"));
            write(&path, &t, &[2, 3]).unwrap();
            assert_eq!(read(&path, element, &[2, 3]).unwrap(), t);
            // The scratch writer makes the same file, directory included.
            let scratch = tmp("scratch-dir").join(format!("rt{i}.npy"));
            write_scratch(&scratch, &t, &[2, 3]).unwrap();
            assert_eq!(
                std::fs::read(&scratch).unwrap(),
                std::fs::read(&path).unwrap()
            );
        }
    }

    #[test]
    fn wrong_dtype_and_shape_are_named() {
        let path = tmp("f64.npy");
        let mut buf = vec![];
        write_array(&mut buf, &[2, 2], [1.0f64, 2.0, 3.0, 4.0].into_iter()).unwrap();
        std::fs::write(&path, &buf).unwrap();
        let e = read(&path, Element::Float(DType::F32), &[2, 2]).unwrap_err();
        assert!(e.to_string().contains("<f8"), "{e}");

        let path = tmp("shape.npy");
        write(&path, &Tensor::F32(vec![0.0; 6]), &[2, 3]).unwrap();
        let e = read(&path, Element::Float(DType::F32), &[3, 2]).unwrap_err();
        assert!(matches!(e, NpyError::Shape { .. }), "{e}");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let path = tmp("garbage.npy");
        std::fs::write(&path, b"\x93NUMPY garbage").unwrap();
        assert!(read(&path, Element::Float(DType::F32), &[1]).is_err());
    }
}
