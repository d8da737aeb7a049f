"""What a CMake file compiles for (cmake_targets.py): GPU target lists and kernel-gating option defaults, on real
git histories."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import FindingKind, explain

CMAKELISTS = """\
cmake_minimum_required(VERSION 3.18)
project(kernels LANGUAGES CXX)

option(KERNELS_ENABLE_NCCL "enable nccl" OFF)
option(KERNELS_BUILD_TESTS "build the tests" ON)

if(WITH_CUDA)
  enable_language(CUDA)
  set(CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS} -arch=sm_35 --expt-relaxed-constexpr")
  if (CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.8)
    set(CMAKE_CUDA_ARCHITECTURES "70;75;80;86;90;100;120")
  else()
    set(CMAKE_CUDA_ARCHITECTURES "60;70;75")
  endif()
endif()

if(GPU_TARGETS STREQUAL "all")
  # the default list; gfx1100 is left out until it is tuned
  rocm_check_target_ids(DEFAULT_AMDGPU_TARGETS
    TARGETS "gfx803;gfx900:xnack-;gfx90a:xnack+;gfx1030"
  )
  set(GPU_TARGETS "${DEFAULT_AMDGPU_TARGETS}" CACHE STRING "GPU architectures to compile for" FORCE)
endif()

add_library(kernels src/kernels.cu)
"""


def _rows(history: History, sha: str) -> list[tuple[FindingKind, str, str, str | None, str | None]]:
    return [(f.kind, f.file, f.name, f.before, f.after) for f in explain(history.path, sha).table_findings]


def test_a_target_added_to_a_rocm_target_list_is_a_table_row(history: History) -> None:
    history.commit("build", {"CMakeLists.txt": CMAKELISTS, "src/kernels.cu": "int x;\n"})
    sha = history.commit(
        "add gfx942", {"CMakeLists.txt": CMAKELISTS.replace("gfx90a:xnack+;", "gfx90a:xnack+;gfx942;")}
    )

    assert _rows(history, sha) == [
        (FindingKind.TABLE_ENTRY, "CMakeLists.txt", "rocm_check_target_ids(DEFAULT_AMDGPU_TARGETS)", None, "gfx942")
    ]


def test_arch_lists_removed_under_version_conditions_and_a_dropped_arch_flag_are_rows(history: History) -> None:
    history.commit("build", {"CMakeLists.txt": CMAKELISTS})
    start, end = CMAKELISTS.index("  if (CMAKE_CUDA_COMPILER"), CMAKELISTS.index("endif()\nendif()") + 8
    changed = (CMAKELISTS[:start] + CMAKELISTS[end:]).replace(" -arch=sm_35", "")
    sha = history.commit("let torch pick the arches", {"CMakeLists.txt": changed})

    rows = _rows(history, sha)

    assert rows == [
        (
            FindingKind.TABLE_ENTRY,
            "CMakeLists.txt",
            "CMAKE_CUDA_ARCHITECTURES",
            "70; 75; 80; 86; 90; 100; 120; 60; 70; 75",
            None,
        ),
        (FindingKind.TABLE_ENTRY, "CMakeLists.txt", "CMAKE_CUDA_FLAGS", "sm_35", None),
    ]


def test_a_kernel_option_added_or_flipped_is_a_constant_row_and_other_options_are_not(history: History) -> None:
    history.commit("build", {"CMakeLists.txt": CMAKELISTS})
    changed = (
        CMAKELISTS.replace('"enable nccl" OFF', '"enable nccl" ON')
        .replace('"build the tests" ON', '"build the tests" OFF')
        .replace(
            "option(KERNELS_BUILD_TESTS",
            'option(KERNELS_ENABLE_CUDNN "enable cudnn, some kernels need it" OFF)\noption(KERNELS_INSTALL "" ON)\n'
            "option(KERNELS_BUILD_TESTS",
        )
    )
    sha = history.commit("add a cudnn switch", {"CMakeLists.txt": changed})

    # the test and install options gate no kernel
    assert _rows(history, sha) == [
        (FindingKind.CONSTANT, "CMakeLists.txt", "KERNELS_ENABLE_CUDNN", None, "OFF"),
        (FindingKind.CONSTANT, "CMakeLists.txt", "KERNELS_ENABLE_NCCL", "OFF", "ON"),
    ]


def test_comments_reordering_conditions_and_cmake_in_tests_or_whole_files_give_no_rows(history: History) -> None:
    history.commit(
        "build",
        {
            "CMakeLists.txt": CMAKELISTS,
            "cmake/arches.cmake": 'set(HIP_ARCHS "gfx90a")\n',
            "cmake/hip.cmake": 'list(APPEND HIP_ARCHS "90;gfx90a")\n',
            "tests/CMakeLists.txt": "",
        },
    )
    changed = (
        CMAKELISTS.replace("gfx1100 is left out", "gfx1100 and gfx1200 are left out")
        .replace('"70;75;80;86;90;100;120"', '"120;100;90;86;80;75;70"')
        .replace('GPU_TARGETS STREQUAL "all"', 'GPU_TARGETS MATCHES "gfx1200|all"')
    )
    sha = history.commit(
        "tidy the build",
        {
            "CMakeLists.txt": changed,
            "cmake/arches.cmake": None,
            "cmake/new_arches.cmake": 'set(HIP_ARCHS "gfx942")\n',
            "cmake/hip.cmake": 'list(APPEND HIP_ARCHS "90;gfx90a;gfx942") # gfx950 next\n',
            "tests/CMakeLists.txt": 'set(CMAKE_CUDA_ARCHITECTURES "90")\n',
        },
    )

    diff = explain(history.path, sha)

    # only the list a kept .cmake file extends is a row (its "90" is no gfx target in a HIP_ARCHS list)
    assert [(f.kind, f.file, f.name, f.before, f.after) for f in diff.table_findings] == [
        (FindingKind.TABLE_ENTRY, "cmake/hip.cmake", "HIP_ARCHS", None, "gfx942")
    ]
    assert diff.notes == ()
