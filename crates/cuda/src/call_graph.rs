//! lanefold's call path for one synchronized call: a one-node CUDA graph
//! built once per prepared kernel, whose kernel parameters are rewritten
//! (`cuGraphExecKernelNodeSetParams`) only when a call's arguments differ
//! from the last call's, then replayed. On the H200 a one-node graph
//! replay reached the GPU about 2.4 µs sooner than `cuLaunchKernel(Ex)` of
//! the same kernel. A cluster kernel's node
//! carries its cluster dimension as a node attribute.
//!
//! The host learns of completion by spinning on a host-mapped flag
//! ([`crate::completion`]) that a one-thread writer, the graph's second
//! node, sets behind the kernel. Where that cannot be set up, the kernel's
//! self-signalling form ([`lanefold_codegen::self_signalling`], group 0
//! watching the others' counts) writes it; where no flag works, a stream
//! synchronize. The order below is the measured one.

use crate::completion::{signal_kernel, HostFlag};
use crate::{driver, CudaBackend, CudaError, DeviceArgs, Loaded};
use cudarc::driver::{sys, CudaSlice, DevicePtr};
use lanefold_codegen::{CodegenOptions, Signal};
use std::ffi::c_void;
use std::sync::Arc;

pub(crate) struct CallGraph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    node: sys::CUgraphNode,
    /// Byte sizes of the kernel node's arguments, in launch order.
    sizes: Vec<usize>,
    /// The argument values the exec's kernel node holds: a call with the
    /// same ones replays it without rewriting its parameters.
    current: Vec<u64>,
}

/// The value behind one raw argument pointer, as the launch reads it:
/// every pointer, 32-bit integer and word is at most 8 bytes and is read
/// from its own storage, so its first `size` bytes are the value.
fn argument_value(p: *mut c_void, size: usize) -> u64 {
    let mut v = 0u64;
    // SAFETY: the pointer addresses at least `size` (<= 8) live bytes of
    // argument storage, as for the launch itself.
    unsafe { std::ptr::copy_nonoverlapping(p.cast::<u8>(), (&mut v as *mut u64).cast(), size) };
    v
}

/// Byte sizes of a kernel's arguments: its parameters (pointers 8, the two
/// ints 4), then `extra` 8-byte and 4-byte trailing ones as given.
fn argument_sizes(loaded: &Loaded, extra: &[usize]) -> Vec<usize> {
    loaded
        .kernel
        .params
        .iter()
        .map(|p| match p.kind {
            lanefold_codegen::ParamKind::Input | lanefold_codegen::ParamKind::Output => 8,
            lanefold_codegen::ParamKind::Rows | lanefold_codegen::ParamKind::N => 4,
        })
        .chain(extra.iter().copied())
        .collect()
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
    /// Build and instantiate the graph for `loaded` with the raw arguments
    /// `raw` (of byte sizes `sizes`), and `trailing` as a second node that
    /// depends on the kernel's (a cluster kernel's node carries its cluster
    /// dimension).
    pub(crate) fn build(
        backend: &CudaBackend,
        loaded: &Loaded,
        raw: &mut [*mut c_void],
        sizes: &[usize],
        trailing: Option<TrailingNode>,
    ) -> Result<CallGraph, CudaError> {
        backend
            .ctx
            .bind_to_thread()
            .map_err(driver("binding the context"))?;
        let params = node_params(loaded, raw);
        let mut out = CallGraph {
            graph: std::ptr::null_mut(),
            exec: std::ptr::null_mut(),
            node: std::ptr::null_mut(),
            sizes: sizes.to_vec(),
            current: raw
                .iter()
                .zip(sizes)
                .map(|(&p, &size)| argument_value(p, size))
                .collect(),
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
            if let Some(blocks) = loaded.kernel.cluster {
                // The cluster shape is a node attribute here, as it is a
                // launch attribute of a direct launch.
                let attr = crate::cluster_dimension(blocks);
                sys::cuGraphKernelNodeSetAttribute(out.node, attr.id, &attr.value)
                    .result()
                    .map_err(driver("setting the call graph's cluster dimension"))?;
            }
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
        Ok(out)
    }

    /// One call: this call's arguments into the node where they changed,
    /// then one replay.
    pub(crate) fn launch(
        &mut self,
        backend: &CudaBackend,
        loaded: &Loaded,
        raw: &mut [*mut c_void],
    ) -> Result<(), CudaError> {
        backend
            .ctx
            .bind_to_thread()
            .map_err(driver("binding the context"))?;
        let changed = raw
            .iter()
            .zip(&self.sizes)
            .zip(&self.current)
            .any(|((&p, &size), &held)| argument_value(p, size) != held);
        if changed {
            let params = node_params(loaded, raw);
            // SAFETY: the exec and node are live (owned by self); `params`
            // points at live argument storage, copied by the driver.
            unsafe { sys::cuGraphExecKernelNodeSetParams_v2(self.exec, self.node, &params) }
                .result()
                .map_err(driver("setting the call's parameters"))?;
            // Recorded only once the node holds them.
            for ((&p, &size), held) in raw.iter().zip(&self.sizes).zip(&mut self.current) {
                *held = argument_value(p, size);
            }
        }
        // SAFETY: a live exec and stream of the current context.
        unsafe { sys::cuGraphLaunch(self.exec, backend.stream.cu_stream()) }
            .result()
            .map_err(driver("launching the call graph"))
    }
}

impl Drop for CallGraph {
    fn drop(&mut self) {
        // SAFETY: handles created in `build`, destroyed once; null is skipped.
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

/// How a call tells the host it has finished.
enum Completion {
    /// The kernel's self-signalling form: its last group writes the flag.
    SelfSignalled {
        signal: Signal,
        flag: HostFlag,
        /// The self-signalling kernel, launched instead of the prepared one.
        kernel: Arc<Loaded>,
        /// Its group counter: zero between calls (the last group resets it).
        _counter: CudaSlice<u32>,
        counter_ptr: u64,
    },
    /// A one-thread writer as the call graph's second node (kept loaded
    /// as long as the graph refers to it).
    TrailingNode { flag: HostFlag, _writer: Loaded },
    /// No flag: a stream synchronize.
    Synchronize,
}

/// lanefold's call path for one prepared kernel: the call graph and how
/// its completion reaches the host.
pub(crate) struct CallPath {
    graph: CallGraph,
    completion: Completion,
    /// A call was launched and its flag not yet seen: the next launch
    /// waits for it before clearing the flag, so a late write from this
    /// call cannot be taken for the next one's.
    unwaited: bool,
}

/// The word every flagged call writes (the flag is cleared before each).
const DONE_WORD: u32 = 1;

/// How lanefold's call learns that its kernel has finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallCompletion {
    /// The kernel's self-signalling form writes the flag.
    Kernel(Signal),
    /// A one-thread writer follows the kernel as a second graph node.
    FlagNode,
}

/// The completions a call path tries, in order: the flag node (fastest
/// on the H200 in a 2026-12-01 probe, by 0.03-0.6 µs over the watcher form
/// and 0.7-2.7 over the ticket form at 1024x4096), then the watcher form.
const COMPLETIONS: [CallCompletion; 2] = [
    CallCompletion::FlagNode,
    CallCompletion::Kernel(Signal::Watcher),
];

impl CallPath {
    /// Build the path with `args` and make one call through it (waited for
    /// where it ends with a flag): each of [`COMPLETIONS`] in turn, then a
    /// plain graph and a synchronize. A flag is used only if that first
    /// call's write arrives.
    pub(crate) fn build(
        backend: &CudaBackend,
        loaded: &Loaded,
        options: &CodegenOptions,
        args: &mut DeviceArgs,
    ) -> Result<CallPath, CudaError> {
        for completion in COMPLETIONS {
            match CallPath::build_as(backend, loaded, options, args, completion) {
                Ok(path) => return Ok(path),
                Err(e) => {
                    eprintln!(
                        "lanefold: {}: no {completion:?} completion ({e})",
                        loaded.kernel.name
                    );
                    // Whatever that attempt left running ends before the next.
                    backend
                        .stream
                        .synchronize()
                        .map_err(driver("after a failed call-path attempt"))?;
                }
            }
        }
        let mut raw = args.raw(&loaded.kernel);
        let sizes = argument_sizes(loaded, &[]);
        let graph = CallGraph::build(backend, loaded, &mut raw, &sizes, None)?;
        let mut path = CallPath {
            graph,
            completion: Completion::Synchronize,
            unwaited: false,
        };
        path.launch(backend, loaded, args)?;
        path.wait(backend)?;
        Ok(path)
    }

    /// The path with `completion` and nothing else, proven by one call
    /// whose flag arrives (the latency probe compares them).
    pub(crate) fn build_as(
        backend: &CudaBackend,
        loaded: &Loaded,
        options: &CodegenOptions,
        args: &mut DeviceArgs,
        completion: CallCompletion,
    ) -> Result<CallPath, CudaError> {
        match completion {
            CallCompletion::Kernel(signal) => {
                CallPath::self_signalled(backend, loaded, options, args, signal)
            }
            CallCompletion::FlagNode => CallPath::flag_node(backend, loaded, args),
        }
    }

    fn flag_node(
        backend: &CudaBackend,
        loaded: &Loaded,
        args: &mut DeviceArgs,
    ) -> Result<CallPath, CudaError> {
        let sizes = argument_sizes(loaded, &[]);
        let writer = backend.load_helper(&signal_kernel())?;
        let mut flag = HostFlag::new()?;
        let trailing = TrailingNode {
            loaded: &writer,
            pointer: flag.device,
            word: DONE_WORD,
        };
        let mut raw = args.raw(&loaded.kernel);
        let mut graph = CallGraph::build(backend, loaded, &mut raw, &sizes, Some(trailing))?;
        flag.reset();
        graph.launch(backend, loaded, &mut raw)?;
        flag.wait_for(DONE_WORD)?;
        Ok(CallPath {
            graph,
            completion: Completion::TrailingNode {
                flag,
                _writer: writer,
            },
            unwaited: false,
        })
    }

    /// The self-signalling path, proven by one call whose flag arrives.
    fn self_signalled(
        backend: &CudaBackend,
        loaded: &Loaded,
        options: &CodegenOptions,
        args: &mut DeviceArgs,
        signal: Signal,
    ) -> Result<CallPath, CudaError> {
        let kernel = lanefold_codegen::self_signalling(&loaded.kernel, signal)?;
        let kernel = backend.load_kernel(kernel, options)?;
        let counter = backend
            .stream
            .alloc_zeros::<u32>(1)
            .map_err(driver("allocating the call's group counter"))?;
        let (counter_ptr, guard) = counter.device_ptr(&backend.stream);
        drop(guard);
        let flag = HostFlag::new()?;
        let (mut count, mut device, mut word) = (counter_ptr, flag.device, DONE_WORD);
        let mut raw = signalled_args(args, &kernel, &mut count, &mut device, &mut word);
        let sizes = argument_sizes(&kernel, &SIGNAL_SIZES);
        let graph = CallGraph::build(backend, &kernel, &mut raw, &sizes, None)?;
        let mut path = CallPath {
            graph,
            completion: Completion::SelfSignalled {
                signal,
                flag,
                kernel,
                _counter: counter,
                counter_ptr,
            },
            unwaited: false,
        };
        path.launch(backend, loaded, args)?;
        path.wait(backend)?;
        Ok(path)
    }

    /// Does a call end with the flag (rather than a stream synchronize)?
    pub(crate) fn waits_on_flag(&self) -> bool {
        !matches!(self.completion, Completion::Synchronize)
    }

    /// How a call learns it has finished; None: a stream synchronize.
    pub(crate) fn completion(&self) -> Option<CallCompletion> {
        match &self.completion {
            Completion::SelfSignalled { signal, .. } => Some(CallCompletion::Kernel(*signal)),
            Completion::TrailingNode { .. } => Some(CallCompletion::FlagNode),
            Completion::Synchronize => None,
        }
    }

    fn flag_mut(&mut self) -> Option<&mut HostFlag> {
        match &mut self.completion {
            Completion::SelfSignalled { flag, .. } | Completion::TrailingNode { flag, .. } => {
                Some(flag)
            }
            Completion::Synchronize => None,
        }
    }

    /// Launch one call with `args`.
    pub(crate) fn launch(
        &mut self,
        backend: &CudaBackend,
        loaded: &Loaded,
        args: &mut DeviceArgs,
    ) -> Result<(), CudaError> {
        let unwaited = self.unwaited;
        if let Some(flag) = self.flag_mut() {
            if unwaited {
                flag.wait_for(DONE_WORD)?;
            }
            flag.reset();
            self.unwaited = true;
        }
        match &self.completion {
            Completion::SelfSignalled {
                flag,
                kernel,
                counter_ptr,
                ..
            } => {
                let (mut count, mut device, mut word) = (*counter_ptr, flag.device, DONE_WORD);
                let mut raw = signalled_args(args, kernel, &mut count, &mut device, &mut word);
                self.graph.launch(backend, kernel, &mut raw)
            }
            _ => {
                let mut raw = args.raw(&loaded.kernel);
                self.graph.launch(backend, loaded, &mut raw)
            }
        }
    }

    /// Wait until the last call has finished on the GPU.
    pub(crate) fn wait(&mut self, backend: &CudaBackend) -> Result<(), CudaError> {
        match self.flag_mut() {
            Some(flag) => {
                flag.wait_for(DONE_WORD)?;
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

/// Byte sizes of the self-signalling form's trailing arguments: the
/// counter's and the flag's device pointers, the word.
const SIGNAL_SIZES: [usize; 3] = [8, 8, 4];

/// Raw arguments of the self-signalling kernel: the call's own, then the
/// counter, the flag and the word (each borrowed; they must outlive the
/// launch).
fn signalled_args(
    args: &mut DeviceArgs,
    kernel: &Loaded,
    count: &mut u64,
    flag: &mut u64,
    word: &mut u32,
) -> Vec<*mut c_void> {
    let mut raw = args.raw(&kernel.kernel);
    raw.push((count as *mut u64).cast());
    raw.push((flag as *mut u64).cast());
    raw.push((word as *mut u32).cast());
    raw
}
