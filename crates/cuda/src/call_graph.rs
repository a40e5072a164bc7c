//! lanefold's call path for one synchronized call: a one-node CUDA graph
//! built once per prepared kernel, whose kernel parameters are rewritten
//! for each call (`cuGraphExecKernelNodeSetParams`) before it is replayed.
//! On the H200 a one-node graph replay reached the GPU about 2.4 µs sooner
//! than `cuLaunchKernel(Ex)` of the same kernel (bench/NOTES.md, campaign
//! 5). Cluster kernels keep the direct launch: the cluster dimension is a
//! launch attribute this path does not carry. [`CallPath`] adds the
//! completion flag's node behind the kernel, so the host's wait is a spin
//! on pinned memory.

use crate::completion::{signal_kernel, HostFlag};
use crate::{driver, CudaBackend, CudaError, DeviceArgs, Loaded};
use cudarc::driver::sys;

pub(crate) struct CallGraph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    node: sys::CUgraphNode,
}

fn node_params(loaded: &Loaded, raw: &mut [*mut std::ffi::c_void]) -> sys::CUDA_KERNEL_NODE_PARAMS {
    let k = &loaded.kernel;
    // SAFETY: a plain-data struct; zero (null kern/ctx: the function and
    // the current context are used) is valid.
    let mut p: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
    p.func = loaded.function.cu_function();
    (p.gridDimX, p.gridDimY, p.gridDimZ) = k.grid;
    (p.blockDimX, p.blockDimY, p.blockDimZ) = k.block;
    p.sharedMemBytes = k.shared_bytes;
    p.kernelParams = raw.as_mut_ptr();
    p
}

/// A one-thread kernel node after the call's kernel (the latency probe's
/// flag writer) and its two arguments: a device pointer and a word.
pub(crate) struct TrailingNode<'a> {
    pub loaded: &'a Loaded,
    pub pointer: u64,
    pub word: u32,
}

/// Kernel arguments `(pointer, word)` for a launch, borrowed from `pointer`
/// and `word`, which must outlive it.
pub(crate) fn pointer_and_word(pointer: &mut u64, word: &mut u32) -> [*mut std::ffi::c_void; 2] {
    [(pointer as *mut u64).cast(), (word as *mut u32).cast()]
}

impl CallGraph {
    /// Build and instantiate the graph for `loaded` with `args`; None for
    /// a cluster kernel.
    pub(crate) fn new(
        backend: &CudaBackend,
        loaded: &Loaded,
        args: &mut DeviceArgs,
    ) -> Result<Option<CallGraph>, CudaError> {
        CallGraph::with_trailing(backend, loaded, args, None)
    }

    /// The same graph with `trailing` as a second node that depends on the
    /// call's kernel node.
    pub(crate) fn with_trailing(
        backend: &CudaBackend,
        loaded: &Loaded,
        args: &mut DeviceArgs,
        trailing: Option<TrailingNode>,
    ) -> Result<Option<CallGraph>, CudaError> {
        if loaded.kernel.cluster.is_some() {
            return Ok(None);
        }
        backend
            .ctx
            .bind_to_thread()
            .map_err(driver("binding the context"))?;
        let mut raw = args.raw(&loaded.kernel);
        let params = node_params(loaded, &mut raw);
        let mut out = CallGraph {
            graph: std::ptr::null_mut(),
            exec: std::ptr::null_mut(),
            node: std::ptr::null_mut(),
        };
        // SAFETY: out-pointers to locals; `params` points at live argument
        // storage for the duration of the call (the driver copies it).
        unsafe {
            sys::cuGraphCreate(&mut out.graph, 0)
                .result()
                .map_err(driver("creating the call graph"))?;
            sys::cuGraphAddKernelNode_v2(&mut out.node, out.graph, std::ptr::null(), 0, &params)
                .result()
                .map_err(driver("adding the call graph's kernel node"))?;
            if let Some(t) = trailing {
                let (mut pointer, mut word) = (t.pointer, t.word);
                let mut raw = pointer_and_word(&mut pointer, &mut word);
                let tail = node_params(t.loaded, &mut raw);
                let mut node: sys::CUgraphNode = std::ptr::null_mut();
                sys::cuGraphAddKernelNode_v2(&mut node, out.graph, &out.node, 1, &tail)
                    .result()
                    .map_err(driver("adding the call graph's trailing node"))?;
            }
            sys::cuGraphInstantiateWithFlags(&mut out.exec, out.graph, 0)
                .result()
                .map_err(driver("instantiating the call graph"))?;
            sys::cuGraphUpload(out.exec, backend.stream.cu_stream())
                .result()
                .map_err(driver("uploading the call graph"))?;
        }
        Ok(Some(out))
    }

    /// One call: this call's arguments into the node, then one replay.
    pub(crate) fn launch(
        &self,
        backend: &CudaBackend,
        loaded: &Loaded,
        args: &mut DeviceArgs,
    ) -> Result<(), CudaError> {
        backend
            .ctx
            .bind_to_thread()
            .map_err(driver("binding the context"))?;
        let mut raw = args.raw(&loaded.kernel);
        let params = node_params(loaded, &mut raw);
        // SAFETY: the exec and node are live (owned by self); `params`
        // points at live argument storage, copied by the driver.
        unsafe {
            sys::cuGraphExecKernelNodeSetParams_v2(self.exec, self.node, &params)
                .result()
                .map_err(driver("setting the call's parameters"))?;
            sys::cuGraphLaunch(self.exec, backend.stream.cu_stream())
                .result()
                .map_err(driver("launching the call graph"))
        }
    }
}

impl Drop for CallGraph {
    fn drop(&mut self) {
        // SAFETY: handles created in `new`, destroyed once; null is skipped.
        unsafe {
            if !self.exec.is_null() {
                let _ = sys::cuGraphExecDestroy(self.exec);
            }
            if !self.graph.is_null() {
                let _ = sys::cuGraphDestroy(self.graph);
            }
        }
    }
}

/// lanefold's call path for one prepared kernel: the call graph and, where
/// the driver allows, the completion flag its trailing node writes, so the
/// caller waits by spinning on host memory instead of `cuStreamSynchronize`
/// ([`crate::completion`]). Cluster kernels launch directly and synchronize.
pub(crate) struct CallPath {
    graph: Option<CallGraph>,
    /// The flag and the writer kernel its graph node runs (kept loaded as
    /// long as the graph refers to it).
    completion: Option<(HostFlag, Loaded)>,
    /// A call was launched and its flag not yet seen: the next launch
    /// waits for it before clearing the flag, so a late write from this
    /// call cannot be taken for the next one's.
    unwaited: bool,
}

impl CallPath {
    /// Build the path with `args` and make one call through it (waited for
    /// where it ends with the flag); the flag is used only if that call's
    /// write arrives.
    pub(crate) fn build(
        backend: &CudaBackend,
        loaded: &Loaded,
        args: &mut DeviceArgs,
    ) -> Result<CallPath, CudaError> {
        // Without a flag: `graph` (None: a direct launch), and synchronize.
        let unflagged = |graph: Option<CallGraph>, args: &mut DeviceArgs| {
            let mut path = CallPath {
                graph,
                completion: None,
                unwaited: false,
            };
            path.launch(backend, loaded, args)?;
            Ok(path)
        };
        if loaded.kernel.cluster.is_some() {
            return unflagged(None, args);
        }
        let flagged = (|| -> Result<Option<CallPath>, CudaError> {
            let signal = backend.load_helper(&signal_kernel())?;
            let mut flag = HostFlag::new()?;
            let trailing = TrailingNode {
                loaded: &signal,
                pointer: flag.device,
                word: 1,
            };
            let Some(graph) = CallGraph::with_trailing(backend, loaded, args, Some(trailing))?
            else {
                return Ok(None);
            };
            flag.reset();
            graph.launch(backend, loaded, args)?;
            flag.wait_for(1)?;
            Ok(Some(CallPath {
                graph: Some(graph),
                completion: Some((flag, signal)),
                unwaited: false,
            }))
        })();
        match flagged {
            Ok(Some(path)) => Ok(path),
            // No flag here (no mapped memory, the writer did not compile,
            // or its write never arrived): the graph alone.
            Ok(None) | Err(_) => {
                let graph = CallGraph::new(backend, loaded, args)?;
                unflagged(graph, args)
            }
        }
    }

    /// Does a call end with the flag (rather than a stream synchronize)?
    pub(crate) fn waits_on_flag(&self) -> bool {
        self.completion.is_some()
    }

    /// Launch one call with `args`.
    pub(crate) fn launch(
        &mut self,
        backend: &CudaBackend,
        loaded: &Loaded,
        args: &mut DeviceArgs,
    ) -> Result<(), CudaError> {
        if let Some((flag, _)) = self.completion.as_mut() {
            if self.unwaited {
                flag.wait_for(1)?;
            }
            flag.reset();
            self.unwaited = true;
        }
        match &self.graph {
            Some(g) => g.launch(backend, loaded, args),
            None => backend.launch(loaded, args),
        }
    }

    /// Wait until the last call has finished on the GPU.
    pub(crate) fn wait(&mut self, backend: &CudaBackend) -> Result<(), CudaError> {
        match self.completion.as_ref() {
            Some((flag, _)) => {
                flag.wait_for(1)?;
                self.unwaited = false;
                Ok(())
            }
            None => backend
                .stream
                .synchronize()
                .map_err(driver("waiting for the call")),
        }
    }
}
