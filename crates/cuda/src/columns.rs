//! The norms' column gradients (dweight, dbias) on the device from host
//! tensors: the selftest's path to codegen's two column kernels (the
//! Python package launches the same kernels on torch's memory).

use crate::{driver, CudaBackend, CudaError};
use cudarc::driver::DevicePtr;
use lanefold_codegen::{column_grad_kernels, column_partials_len, ColumnGradKind};
use lanefold_cpu::{Buffers, Tensor};
use lanefold_ir::DType;

impl CudaBackend {
    /// dweight (and, for layernorm, dbias) of `rows` x `n` rows `x` (or h)
    /// and their gradient `dy`, in `dtype`: uploaded, both kernels launched
    /// on the backend's stream, synchronized and downloaded.
    #[allow(clippy::too_many_arguments)]
    pub fn column_grads(
        &self,
        kind: ColumnGradKind,
        dtype: DType,
        x: &Tensor,
        dy: &Tensor,
        rows: usize,
        n: usize,
        eps: f32,
    ) -> Result<Buffers, CudaError> {
        for (name, t) in [("x", x), ("dy", dy)] {
            if t.len() != rows * n || t.dtype_name() != dtype.name() {
                return Err(CudaError::Data(format!(
                    "'{name}' is {} x {}, expected {} x {}",
                    t.len(),
                    t.dtype_name(),
                    rows * n,
                    dtype.name()
                )));
            }
        }
        let [first, second] = column_grad_kernels(kind, dtype, rows, n, eps)?;
        let (first, second) = (
            self.load_raw_kernel(first, rows, n)?,
            self.load_raw_kernel(second, rows, n)?,
        );
        let upload = |t: &Tensor| {
            self.stream
                .clone_htod(&t.as_bytes())
                .map_err(driver("uploading a buffer"))
        };
        let alloc = |bytes: usize| {
            self.stream
                .alloc_zeros::<u8>(bytes)
                .map_err(driver("allocating an output"))
        };
        let (dx, ddy) = (upload(x)?, upload(dy)?);
        let partials = alloc(4 * column_partials_len(kind, rows, n))?;
        let mut names = vec!["dweight"];
        if kind == ColumnGradKind::Layernorm {
            names.push("dbias");
        }
        let outs = names
            .iter()
            .map(|_| alloc(n * dtype.size_bytes()))
            .collect::<Result<Vec<_>, _>>()?;
        let ptr = |s: &cudarc::driver::CudaSlice<u8>| s.device_ptr(&self.stream).0;
        let mut second_args = vec![("partials", ptr(&partials))];
        second_args.extend(names.iter().zip(&outs).map(|(name, s)| (*name, ptr(s))));
        let stream = self.stream.cu_stream();
        // SAFETY: every pointer is a live allocation of this backend's
        // context of the kernels' lengths (x and dy rows x n, partials of
        // `column_partials_len` floats, outputs of n), freed only after the
        // synchronize below; both launches go on the backend's stream.
        unsafe {
            self.launch_raw(
                &first,
                &[
                    ("x", ptr(&dx)),
                    ("dy", ptr(&ddy)),
                    ("partials", ptr(&partials)),
                ],
                stream,
            )?;
            self.launch_raw(&second, &second_args, stream)?;
        }
        self.stream
            .synchronize()
            .map_err(driver("running the column kernels"))?;
        let mut out = Buffers::new();
        for (name, slice) in names.iter().zip(&outs) {
            let bytes = self
                .stream
                .clone_dtoh(slice)
                .map_err(driver("downloading an output"))?;
            let mut t = Tensor::poisoned(dtype, n);
            t.copy_from_bytes(&bytes);
            out.insert(name.to_string(), t);
        }
        Ok(out)
    }
}
