"""Cython sources read as Python: each rewrite rule on real Cython snippets, and the rows of a changed .pyx."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from analysis_history import History

from bisector.analysis import FindingKind, explain
from bisector.analysis.cython_source import python_source_of_cython


def python_of(cython: str) -> str:
    """The rewrite of a snippet, checked to parse and to keep every line where it was."""
    source = textwrap.dedent(cython)
    python = python_source_of_cython(source)
    assert python.count("\n") == source.count("\n")
    ast.parse(python)
    return python


def test_typed_declarations_keep_their_names_and_values() -> None:
    python = python_of("""\
        cdef str _cub_path = _environment.get_cub_path()
        cdef size_t gridx = min(
            0x7fffffffUL, (size + block_max_size - 1) // block_max_size)
        cdef Py_ssize_t cnt=0, index=-1, new_size=1
        cdef _ncclConfig_t* c_config = &config._config if config else NULL
        cdef int dev_id
    """)

    assert python.splitlines() == [
        "_cub_path = _environment.get_cub_path()",
        "gridx = min(",
        "    0x7fffffff, (size + block_max_size - 1) // block_max_size)",
        "cnt =0; index =-1; new_size =1",
        "c_config = config._config if config else NULL",
        "pass",
    ]


def test_cdef_and_cpdef_functions_lose_their_types_and_c_clauses() -> None:
    python = python_of("""\
        cpdef inline tuple _can_use_cub_block_reduction(
                list in_args, list out_args, tuple reduce_axis, tuple out_axis):
            return None

        cdef (bint, Py_ssize_t) can_use_device_segmented_reduce(  # noqa: E211
                int op, x_dtype, Py_ssize_t ndim, reduce_axis, out_axis,
                str order='C'):
            return (True, 0)

        cdef bint _try_to_call_cub_reduction(self, list in_args) except *:
            return False

        cdef inline void _launch(intptr_t func, const void* args) nogil:
            pass
    """)

    assert python.splitlines()[:7] == [
        "def _can_use_cub_block_reduction(",
        "        in_args, out_args, reduce_axis, out_axis):",
        "    return None",
        "",
        "def can_use_device_segmented_reduce(",
        "        op, x_dtype, ndim, reduce_axis, out_axis,",
        "        order='C'):",
    ]
    assert "def _try_to_call_cub_reduction(self, in_args):" in python
    assert "def _launch(func, args):" in python


def test_typed_parameters_of_def_functions_and_pxd_prototypes() -> None:
    python = python_of("""\
        def device_segmented_reduce(_ndarray_base x, op, tuple reduce_axis,
                                    tuple out_axis, out=None, bint keepdims=False, *args):
            pass

        cdef class _TypeMap:
            @staticmethod
            cdef _ArgInfo from_arg(object arg)
            cpdef str get_typename(dtype, type_decls=*)
    """)

    assert python.splitlines()[:2] == [
        "def device_segmented_reduce(x, op, reduce_axis,",
        "                            out_axis, out=None, keepdims=False, *args):",
    ]
    assert "    def from_arg(arg): ..." in python
    assert "    def get_typename(dtype, type_decls=...): ..." in python


def test_cdef_classes_and_their_declaration_blocks() -> None:
    python = python_of("""\
        cdef class Function:

            cdef public:
                tuple _pairs
                readonly intptr_t ptr

            cdef readonly Module module
    """)

    assert python.splitlines() == [
        "class Function:",
        "",
        "    if True:",
        "        pass",
        "        pass",
        "",
        "    pass",
    ]


def test_cimports_includes_ctypedefs_and_extern_blocks_become_pass_or_blank() -> None:
    python = python_of("""\
        from cupy._core.core cimport _ndarray_base
        cimport cython
        include "_routines_common.pxi"
        ctypedef int (*f_type)(int) nogil

        cdef extern from 'cupy_cub.h' nogil:
            void cub_device_reduce(void*, size_t&, void*, void*, int, Stream_t,
                                   int, int)
            size_t cub_device_reduce_get_workspace_size(void*, void*, int, Stream_t,
                                                        int, int)

        ctypedef struct _Params:
            int ndim

        x = 1
    """)

    assert python.splitlines() == [
        "pass",
        "pass",
        "pass",
        "pass",
        "",
        "pass",
        "",
        "",
        "",
        "",
        "",
        "pass",
        "",
        "",
        "x = 1",
    ]


def test_compile_time_if_and_def_become_python() -> None:
    python = python_of("""\
        DEF MAX_NDIM = 25
        IF CUPY_HIP_VERSION > 0:
            if blockx > 0:
                gridx = min(gridx, 0xffffffffUL // blockx)
        ELIF CUPY_CUDA_VERSION > 12000:
            pass
        ELSE:
            pass
    """)

    assert python.splitlines() == [
        "MAX_NDIM = 25",
        "if CUPY_HIP_VERSION > 0:",
        "    if blockx > 0:",
        "        gridx = min(gridx, 0xffffffff // blockx)",
        "elif CUPY_CUDA_VERSION > 12000:",
        "    pass",
        "else:",
        "    pass",
    ]


def test_casts_are_removed_but_comparisons_kept() -> None:
    python = python_of("""\
        ws_ptr = <void*>ws.ptr
        status = cusparseScsrmv(
            <Handle>handle, <const float *>alpha,  # no-cython-lint
            <const int *>csrSortedRowPtrA, <const float* const*>Aarray)
        if a < b and c > d:
            n = sizeof(void*)
        (<double complex*>ret.ptr)[0] = <unsigned long long>x
        _launch(<size_t>&(kargs[0]), &prog, flags & mask)
        return &self._index[stream_ptr]
    """)

    assert python.splitlines() == [
        "ws_ptr = ws.ptr",
        "status = cusparseScsrmv(",
        "    handle, alpha,  # no-cython-lint",
        "    csrSortedRowPtrA, Aarray)",
        "if a < b and c > d:",
        "    n = sizeof(void)",
        "(ret.ptr)[0] = x",
        "_launch((kargs[0]), prog, flags & mask)",
        "return self._index[stream_ptr]",
    ]


def test_strings_and_old_properties_are_left_alone_or_made_classes() -> None:
    python = python_of('''\
        def cub_histogram(x, y, bins):
            """Use CUB <int> cdef int x = 0
            when it can."""
            return "<int>x"

        cdef class ndarray:
            property shape:
                def __get__(self):
                    return self._shape
    ''')

    assert '    """Use CUB <int> cdef int x = 0' in python
    assert '    return "<int>x"' in python
    assert "    class shape:" in python


CUB_BEFORE = textwrap.dedent("""\
    from cupy._core.core cimport _ndarray_base
    cimport cython

    cdef extern from 'cupy_cub.h' nogil:
        void cub_device_scan(void*, size_t&, void*, void*, int, Stream_t, int, int)


    def device_scan(_ndarray_base x, op):
        cdef void *x_ptr
        cdef int x_size = <int>x.size
        x_ptr = <void *>x.data.ptr
        with nogil:
            cub_device_scan(ws_ptr, ws_size, x_ptr, x_ptr, x_size, s, op_code, dtype_id)
        return x


    cpdef cub_scan(_ndarray_base arr, op):
        if arr._f_contiguous and not arr._c_contiguous:
            return None
        x_dtype = arr.dtype
        if x_dtype == numpy.complex128:
            return None

        cdef int dev_id = device.get_device_id()
        if x_dtype in _cub_support_dtype(False, dev_id):
            return device_scan(arr, op)
        return None
""")


def test_a_changed_dtype_condition_in_a_pyx_is_a_row_of_its_function(tmp_path: Path) -> None:
    history = History(tmp_path / "repo")
    history.commit("cub", {"cupy/cuda/cub.pyx": CUB_BEFORE})
    after = CUB_BEFORE.replace("    if x_dtype == numpy.complex128:\n        return None\n", "")
    sha = history.commit("Enable CUB scan for complex128", {"cupy/cuda/cub.pyx": after})

    diff = explain(history.path, sha)

    relevant = [f for f in diff.findings if f.kind.is_dispatch_relevant]
    assert [(f.kind, f.file, f.name) for f in relevant] == [
        (FindingKind.BRANCH_CONDITION, "cupy/cuda/cub.pyx", "cub_scan")
    ]


def test_a_size_guard_added_to_a_pyx_function_is_a_shape_condition(tmp_path: Path) -> None:
    history = History(tmp_path / "repo")
    history.commit("cub", {"cupy/cuda/cub.pyx": CUB_BEFORE})
    guard = "    if arr.size > 0x7fffffff:\n        return None\n"
    after = CUB_BEFORE.replace("    cdef int dev_id", guard + "    cdef int dev_id")
    sha = history.commit("Guard CUB scan against int overflow", {"cupy/cuda/cub.pyx": after})

    diff = explain(history.path, sha)

    relevant = [(f.kind, f.name, f.key, f.after) for f in diff.findings if f.kind.is_dispatch_relevant]
    assert relevant == [(FindingKind.BRANCH_CONDITION, "cub_scan", "shape condition", "arr.size > 2147483647")]


def test_a_pyx_the_rewrite_cannot_parse_is_skipped_without_a_note(tmp_path: Path) -> None:
    history = History(tmp_path / "repo")
    history.commit("cub", {"cupy/cuda/cub.pyx": CUB_BEFORE})
    broken = CUB_BEFORE.replace("    x_dtype = arr.dtype", "    for i from 0 <= i < n:\n        x_dtype = arr.dtype")
    sha = history.commit("old loop syntax", {"cupy/cuda/cub.pyx": broken.replace("complex128", "complex64")})

    diff = explain(history.path, sha)

    assert diff.files == ("cupy/cuda/cub.pyx",)
    assert diff.findings == ()
