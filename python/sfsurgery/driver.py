"""The CUDA driver calls that load the PTX and prepare launch records.

Through ctypes on libcuda.so.1: no compiler and no extension module. The
modules are loaded into the device's primary context, the one PyTorch
uses; `Kernels` loads them, looks up entry points and picks each record's
launch (the record, or its fallback where the device cannot take its
cooperative launch or clusters). The launches themselves are queued by
prepared.py on the stream the caller passes (PyTorch's current stream),
so that CUDA graph capture records them like any other kernel.
"""

import ctypes
import os
import threading
from typing import Dict, Optional, Tuple

from .errors import DeviceError
from .records import MODULES, Launch

_CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE = 720
_CUDA_ERROR_NOT_SUPPORTED = 801
_CUDA_ERROR_INVALID_CLUSTER_SIZE = 912
CLUSTER_REFUSED = frozenset((_CUDA_ERROR_NOT_SUPPORTED, _CUDA_ERROR_INVALID_CLUSTER_SIZE))
_CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222
# What a launch returns when the calling thread has no context current, or
# another device's (the function and stream belong to the device's primary
# context): prepared.py then launches again with that context current.
CONTEXT_ERRORS = frozenset((201, 400, 709))  # INVALID_CONTEXT, INVALID_HANDLE, CONTEXT_IS_DESTROYED
_ATTR_SMS = 16
_ATTR_MAJOR = 75
_ATTR_MINOR = 76
_ATTR_SHARED_PER_SM = 81
_ATTR_SHARED_OPTIN = 97
_FUNC_MAX_DYNAMIC_SHARED = 8
_FUNC_CARVEOUT = 9
_LAUNCH_COOPERATIVE = 2
_LAUNCH_CLUSTER = 4
# cuTensorMapEncodeTiled's enum values (cuda.h; tools/abi/cuabi.c).
_TENSOR_UINT16, _TENSOR_UINT32 = 1, 2
SWIZZLE_NONE, SWIZZLE_64B, SWIZZLE_128B = 0, 2, 3
_L2_PROMOTION_256B = 3

PTX_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ptx")


class _Attr(ctypes.Structure):
    """CUlaunchAttribute: an id, padding and a 64-byte value union."""

    _fields_ = [("id", ctypes.c_uint32), ("pad", ctypes.c_uint32), ("val", ctypes.c_uint32 * 16)]


class _Config(ctypes.Structure):
    """CUlaunchConfig of cuLaunchKernelEx (cuda.h, CUDA 12 and later)."""

    _fields_ = [
        ("grid", ctypes.c_uint32 * 3),
        ("block", ctypes.c_uint32 * 3),
        ("shared", ctypes.c_uint32),
        ("stream", ctypes.c_void_p),
        ("attrs", ctypes.POINTER(_Attr)),
        ("nattrs", ctypes.c_uint32),
    ]


class Driver:
    """The libcuda functions the package calls."""

    def __init__(self):
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise DeviceError(f"no CUDA driver (libcuda.so.1): {e}") from None
        self._lib = lib
        vp, i32, u32 = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint
        sigs = {
            "cuInit": [u32],
            "cuDriverGetVersion": [ctypes.POINTER(i32)],
            "cuDeviceGet": [ctypes.POINTER(i32), i32],
            "cuDeviceGetAttribute": [ctypes.POINTER(i32), i32, i32],
            "cuDevicePrimaryCtxRetain": [ctypes.POINTER(vp), i32],
            "cuCtxGetCurrent": [ctypes.POINTER(vp)],
            "cuCtxSetCurrent": [vp],
            "cuOccupancyMaxActiveBlocksPerMultiprocessor": [ctypes.POINTER(i32), vp, i32, ctypes.c_size_t],
            "cuOccupancyMaxActiveClusters": [ctypes.POINTER(i32), vp, ctypes.POINTER(_Config)],
            "cuModuleLoadData": [ctypes.POINTER(vp), ctypes.c_char_p],
            "cuModuleGetFunction": [ctypes.POINTER(vp), vp, ctypes.c_char_p],
            "cuFuncSetAttribute": [vp, i32, i32],
            "cuLaunchKernelEx": [ctypes.POINTER(_Config), vp, ctypes.POINTER(vp), ctypes.POINTER(vp)],
            "cuLaunchKernel": [vp, u32, u32, u32, u32, u32, u32, u32, vp, ctypes.POINTER(vp), ctypes.POINTER(vp)],
            "cuGetErrorName": [i32, ctypes.POINTER(ctypes.c_char_p)],
        }
        for name, args in sigs.items():
            try:
                fn = getattr(lib, name)
            except AttributeError:
                raise DeviceError(f"the CUDA driver lacks {name}: it is too old for the kernels (needs CUDA 13)") from None
            fn.argtypes = args
            fn.restype = i32
        # The calls of every launch, through a handle that keeps the GIL:
        # releasing and taking it back costs more than the call, and
        # another Python thread can hold it for up to its switch interval.
        # The price: a launch that waits for room in a full launch queue
        # holds up the process's other Python threads meanwhile.
        fast = ctypes.PyDLL("libcuda.so.1")
        # These two run per call and take only ctypes objects that their
        # callers build once (no argtypes: converting each argument through
        # argtypes costs more than the rest of the call; a plain int would
        # pass as a 32-bit C int, so none is passed).
        # cuLaunchKernelEx(config, function, params, extra) -> CUresult, for
        # prepared launches (prepared.py) that pass their own pointer to a
        # config, c_void_p function, parameter array and None.
        self.launch_ex = fast.cuLaunchKernelEx
        self.launch_ex.restype = i32
        # CUDA 12.0 and later; the prefill kernel needs it. Called with a
        # TensorMap's args.
        self._encode = getattr(fast, "cuTensorMapEncodeTiled", None)
        if self._encode is not None:
            self._encode.restype = i32
        self.check("cuInit", lib.cuInit(0))

    def name(self, code: int) -> str:
        """Returns the CUresult's name, e.g. CUDA_ERROR_INVALID_VALUE."""
        s = ctypes.c_char_p()
        if self._lib.cuGetErrorName(code, ctypes.byref(s)) == 0 and s.value:
            return s.value.decode()
        return f"CUresult {code}"

    def check(self, what: str, code: int) -> None:
        """Raises DeviceError for a failed call."""
        if code != 0:
            raise DeviceError(f"{what}: {self.name(code)} ({code})")

    def version(self) -> int:
        """Returns the driver's CUDA version, e.g. 13000."""
        v = ctypes.c_int()
        self.check("cuDriverGetVersion", self._lib.cuDriverGetVersion(ctypes.byref(v)))
        return v.value

    def device(self, ordinal: int) -> int:
        """Returns the CUdevice of a device ordinal."""
        dev = ctypes.c_int()
        self.check("cuDeviceGet", self._lib.cuDeviceGet(ctypes.byref(dev), ordinal))
        return dev.value

    def attribute(self, dev: int, attr: int) -> int:
        """Returns an attribute of a CUdevice."""
        v = ctypes.c_int()
        self.check("cuDeviceGetAttribute", self._lib.cuDeviceGetAttribute(ctypes.byref(v), attr, dev))
        return v.value

    def primary_context(self, dev: int) -> int:
        """Retains and returns a CUdevice's primary context."""
        ctx = ctypes.c_void_p()
        self.check("cuDevicePrimaryCtxRetain", self._lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
        return ctx.value

    def current(self) -> int:
        """Returns the calling thread's current context (0 for none)."""
        ctx = ctypes.c_void_p()
        self.check("cuCtxGetCurrent", self._lib.cuCtxGetCurrent(ctypes.byref(ctx)))
        return ctx.value or 0

    def set_current(self, ctx: int) -> None:
        """Makes ctx the calling thread's current context."""
        self.check("cuCtxSetCurrent", self._lib.cuCtxSetCurrent(ctx))

    def blocks_per_sm(self, fn: int, threads: int, shared: int) -> Tuple[int, int]:
        """Returns (how many CTAs of fn fit on one SM at once, the CUresult)."""
        v = ctypes.c_int()
        code = self._lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(v), fn, threads, shared)
        return v.value, code

    def active_clusters(self, fn: int, cfg: "_Config") -> Tuple[int, int]:
        """Returns (clusters of cfg that fit at once, the CUresult)."""
        v = ctypes.c_int()
        code = self._lib.cuOccupancyMaxActiveClusters(ctypes.byref(v), fn, ctypes.byref(cfg))
        return v.value, code

    def load(self, image: bytes, what: str) -> int:
        """JIT-compiles a NUL-terminated PTX image into a module."""
        mod = ctypes.c_void_p()
        code = self._lib.cuModuleLoadData(ctypes.byref(mod), image)
        if code == _CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
            raise DeviceError(
                f"loading {what}: the CUDA driver ({self.version()}) is too old for the PTX (needs CUDA 13)"
            )
        self.check(f"loading {what}", code)
        return mod.value

    def function(self, mod: int, entry: str) -> int:
        """Looks up an entry point of a module."""
        fn = ctypes.c_void_p()
        self.check(f"cuModuleGetFunction({entry})", self._lib.cuModuleGetFunction(ctypes.byref(fn), mod, entry.encode()))
        return fn.value

    def set_function_attribute(self, fn: int, attr: int, value: int, what: str) -> None:
        """Sets a CUfunction attribute."""
        self.check(f"cuFuncSetAttribute({what})", self._lib.cuFuncSetAttribute(fn, attr, value))

    def tensor_map(self, t: "TensorMap", addr: int, rows: int) -> None:
        """Encodes t for rows rows of its tensor at device address addr
        (cuTensorMapEncodeTiled)."""
        if self._encode is None:
            raise DeviceError(f"{t.what}: the CUDA driver lacks cuTensorMapEncodeTiled (needs CUDA 12 or newer)")
        t.dims[1] = rows
        t.base.value = addr
        code = self._encode(*t.args)
        if code != 0:
            raise DeviceError(f"cuTensorMapEncodeTiled({t.what}): {self.name(code)} ({code})")

    def launch_plain(self, fn: int, grid, block, shared: int, stream: int, params) -> int:
        """Queues fn with cuLaunchKernel; returns the CUresult."""
        return self._lib.cuLaunchKernel(fn, *grid, *block, shared, stream, params, None)


class TensorMap:
    """A 2-D CUtensorMap of rows × cols elements of elem_bytes bytes, boxes
    of box_cols × box_rows, out-of-bounds elements read as zero, in a
    64-byte aligned slot of 128 bytes that a launch passes by value. The
    encoding's other arguments are kept beside it, so that encoding it for
    another address or row count (Driver.tensor_map) writes one number and
    makes one driver call. args are cuTensorMapEncodeTiled's arguments as
    ctypes objects (the driver's call converts none): base holds the
    tensor's address, dims[1] its rows."""

    def __init__(self, elem_bytes: int, cols: int, box_cols: int, box_rows: int, swizzle: int, what: str):
        self._buf = (ctypes.c_uint64 * 24)()
        start = ctypes.addressof(self._buf)
        self.address = (start + 63) // 64 * 64
        self.dtype = _TENSOR_UINT16 if elem_bytes == 2 else _TENSOR_UINT32
        self.dims = (ctypes.c_uint64 * 2)(cols, 0)
        self.strides = (ctypes.c_uint64 * 1)(cols * elem_bytes)
        self.box = (ctypes.c_uint32 * 2)(box_cols, box_rows)
        self.ones = (ctypes.c_uint32 * 2)(1, 1)
        self.swizzle = swizzle
        self.what = what
        self.base = ctypes.c_void_p(0)
        self.args = (ctypes.c_void_p(self.address), ctypes.c_int(self.dtype), ctypes.c_uint32(2), self.base, self.dims,
                     self.strides, self.box, self.ones, ctypes.c_int(0), ctypes.c_int(swizzle),
                     ctypes.c_int(_L2_PROMOTION_256B), ctypes.c_int(0))


def config(grid: Tuple[int, int, int], block: Tuple[int, int, int], shared: int, cluster: Tuple[int, int, int] = (0, 0, 0),
           cooperative: bool = False) -> Tuple[_Config, ctypes.Array]:
    """Returns a CUlaunchConfig for grid, block and dynamic shared memory,
    with the cluster dimension attribute where cluster is not all zero and
    the cooperative attribute where cooperative, and the attribute array it
    points to, which the caller keeps alive with it. The stream is null
    until the caller sets it."""
    cfg = _Config()
    cfg.grid[:] = grid
    cfg.block[:] = block
    cfg.shared = shared
    attrs = []
    if cluster != (0, 0, 0):
        a = _Attr(id=_LAUNCH_CLUSTER)
        a.val[0], a.val[1], a.val[2] = cluster
        attrs.append(a)
    if cooperative:
        a = _Attr(id=_LAUNCH_COOPERATIVE)
        a.val[0] = 1
        attrs.append(a)
    array = (_Attr * max(len(attrs), 1))(*attrs)
    cfg.attrs = ctypes.cast(array, ctypes.POINTER(_Attr))
    cfg.nattrs = len(attrs)
    return cfg, array


class _Prepared:
    """A record's entry point and launch config, for the occupancy queries
    that choose between it and its fallback."""

    def __init__(self, fn: int, rec: Launch):
        self.fn = fn
        self.rec = rec
        self.cfg, self.attrs = config(rec.grid, rec.block, rec.shared_bytes, rec.cluster, rec.cooperative)


def _refused(rec: Launch, code: int) -> bool:
    """Reports whether the driver refused rec for what its fallback drops
    (kernels/decode.go's refused, launch.md): a cooperative launch too
    large, or clusters the device cannot run."""
    if rec.cooperative and code == _CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE:
        return True
    return rec.cluster != (0, 0, 0) and code in (_CUDA_ERROR_INVALID_CLUSTER_SIZE, _CUDA_ERROR_NOT_SUPPORTED)


class Kernels:
    """The kernels loaded on one device (the decode kernels, the prefill
    kernel and decode_ampere16): modules, entry points, and what launches
    for each record (the record, or its fallback)."""

    def __init__(self, driver: Driver, ordinal: int):
        self.driver = driver
        self.ordinal = ordinal
        dev = driver.device(ordinal)
        self.major = driver.attribute(dev, _ATTR_MAJOR)
        self.minor = driver.attribute(dev, _ATTR_MINOR)
        if self.major < 8:
            raise DeviceError(f"GPU {ordinal} is sm_{self.major}{self.minor}; the 2:4 kernels need sm_80 or newer")
        self.sms = driver.attribute(dev, _ATTR_SMS)
        self.shared_optin = driver.attribute(dev, _ATTR_SHARED_OPTIN)
        self.shared_per_sm = driver.attribute(dev, _ATTR_SHARED_PER_SM)
        self.ctx = driver.primary_context(dev)
        # Reentrant: _prepare, chosen, fall_back and launch_decode call
        # function while they hold it, and function takes it too.
        self._lock = threading.RLock()
        self._modules: Dict[str, int] = {}
        self._functions: Dict[str, int] = {}
        # Keyed by id(record): each _Prepared holds its record, so an id
        # is not reused while its entry exists.
        self._prepared: Dict[int, _Prepared] = {}
        self._use: Dict[int, Launch] = {}

    def limits(self) -> Dict[str, object]:
        """The device's limits as the planner takes them (a launch
        document's "limits"; launchplan.Limits): SMs, the opt-in shared
        memory per block, the shared memory per SM, and whether the sm_90a
        module (the warpgroup forms and the prefill kernel) is for it."""
        return {"sms": self.sms, "shared_per_block": self.shared_optin, "shared_per_sm": self.shared_per_sm,
                "warpgroup": (self.major, self.minor) == (9, 0)}

    def module(self, path: str) -> int:
        """Returns the loaded module of a record's module path."""
        with self._lock:
            return self._module(path)

    def _module(self, path: str) -> int:
        mod = self._modules.get(path)
        if mod is not None:
            return mod
        if path.endswith("_sm90a.ptx") and (self.major, self.minor) != (9, 0):
            raise DeviceError(f"{path} is for sm_90a, this GPU is sm_{self.major}{self.minor}")
        file = os.path.join(PTX_DIR, MODULES[path])
        try:
            with open(file, "rb") as f:
                image = f.read() + b"\0"
        except OSError as e:
            raise DeviceError(f"{file}: {e.strerror or e} (the package ships the repository's kernels/ptx)") from None
        with self.current():
            mod = self.driver.load(image, file)
        self._modules[path] = mod
        return mod

    def function(self, module: str, entry: str) -> int:
        """Returns an entry point, allowed the device's opt-in shared memory
        (looked up once, with the device's context current)."""
        key = module + ":" + entry
        with self._lock:
            fn = self._functions.get(key)
            if fn is None:
                with self.current():
                    fn = self.driver.function(self._module(module), entry)
                    self.driver.set_function_attribute(fn, _FUNC_MAX_DYNAMIC_SHARED, self.shared_optin, entry)
                    self.driver.set_function_attribute(fn, _FUNC_CARVEOUT, 100, entry)
                self._functions[key] = fn
            return fn

    def current(self):
        """A context manager making the device's primary context current and
        putting the thread's previous one back after."""
        return _Current(self.driver, self.ctx)

    def _fits(self, p: _Prepared) -> bool:
        """Reports whether the device takes p's cooperative launch (every
        CTA resident at once) and its clusters: occupancy queries, so the
        choice of a fallback is made before any graph capture."""
        rec = p.rec
        if rec.cooperative:
            per_sm, code = self.driver.blocks_per_sm(p.fn, rec.block[0] * rec.block[1] * rec.block[2], rec.shared_bytes)
            if code == 0 and per_sm * self.sms < rec.grid[0] * rec.grid[1] * rec.grid[2]:
                return False
        if rec.cluster != (0, 0, 0):
            n, code = self.driver.active_clusters(p.fn, p.cfg)
            if code in (_CUDA_ERROR_INVALID_CLUSTER_SIZE, _CUDA_ERROR_NOT_SUPPORTED) or (code == 0 and n < 1):
                return False
        # A query that failed otherwise decides nothing: the launch itself
        # still falls back where the driver refuses it.
        return True

    def prepare(self, rec: Launch) -> None:
        """Loads what rec and its fallback need and picks the one to launch:
        rec, or its fallback where the device cannot take rec's cooperative
        launch or clusters. Called at load, ahead of any capture."""
        with self._lock:
            self._prepare(rec)

    def _prepare(self, rec: Launch) -> None:
        if id(rec) in self._use:
            return
        with self.current():
            for r in (rec, rec.fallback):
                if r is not None and id(r) not in self._prepared:
                    self._prepared[id(r)] = _Prepared(self.function(r.module, r.entry), r)
            use = rec
            if rec.fallback is not None and not self._fits(self._prepared[id(rec)]):
                use = rec.fallback
        self._use[id(rec)] = use

    def chosen(self, rec: Launch) -> Launch:
        """Returns what launches for rec: rec itself, or its fallback."""
        with self._lock:
            self._prepare(rec)
            return self._use[id(rec)]

    def fall_back(self, rec: Launch, refused: Launch) -> Launch:
        """Records that the driver refused refused (what launched for rec)
        for what its fallback drops (_refused): rec launches the fallback
        from then on, here and in every launch prepared after. Returns the
        fallback."""
        with self._lock:
            self._prepare(rec)
            if self._use[id(rec)] is refused:
                self._use[id(rec)] = refused.fallback
            return refused.fallback

    def launch_decode(self, w: int, packed: int, meta: int, n: int, k: int, stream: int) -> None:
        """Queues decode_ampere16: packed + meta back to the dense n × k
        weight at w (grid ceil(n·k/16 / 256), block 256; decode.cuh)."""
        with self._lock:
            fn = self.function("kernels/ptx/sfsurgery.ptx", "decode_ampere16")
            slots = [ctypes.c_void_p(w), ctypes.c_void_p(packed), ctypes.c_void_p(meta), ctypes.c_int(n), ctypes.c_int(k)]
            params = (ctypes.c_void_p * 5)(*[ctypes.addressof(s) for s in slots])
            blocks = (n * k // 16 + 255) // 256
            with self.current():
                code = self.driver.launch_plain(fn, (blocks, 1, 1), (256, 1, 1), 0, stream, params)
            self.driver.check("cuLaunchKernel(decode_ampere16)", code)


class _Current:
    """Makes a context current for a block, then restores the thread's
    previous one (with none before, the primary context stays current, as
    torch leaves it)."""

    def __init__(self, driver: Driver, ctx: int):
        self.driver, self.ctx, self.prev = driver, ctx, 0

    def __enter__(self):
        self.prev = self.driver.current()
        if self.prev != self.ctx:
            self.driver.set_current(self.ctx)

    def __exit__(self, *exc):
        if self.prev != self.ctx and self.prev:
            self.driver.set_current(self.prev)
        return False


_DRIVER: Optional[Driver] = None
_KERNELS: Dict[int, Kernels] = {}
_LOCK = threading.Lock()


def kernels(ordinal: int) -> Kernels:
    """Returns the process's Kernels of a device ordinal, made once."""
    global _DRIVER
    with _LOCK:
        k = _KERNELS.get(ordinal)
        if k is None:
            if _DRIVER is None:
                _DRIVER = Driver()
            k = Kernels(_DRIVER, ordinal)
            _KERNELS[ordinal] = k
        return k
