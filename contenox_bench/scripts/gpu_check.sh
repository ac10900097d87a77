#!/usr/bin/env bash
# The GPU check of issue 29 (contenox_bench/gpu_check.py), for a machine with an NVIDIA GPU,
# CUDA's compiler, CMake and ninja, and a Python with numpy, httpx, jinja2, pytest and
# hypothesis. Nothing in the test command depends on it.
#
#   gpu_check.sh build SRC.tar.xz DIR   # llama.cpp (the commit llama-cpp-python vendors, as a
#                                       # tarball of vendor/llama.cpp) with CUDA, into DIR/build
#   gpu_check.sh run DIR MODEL.gguf OUT # the engine's exactness tests with every layer
#                                       # offloaded, then the speed comparison; logs into OUT
#
# llama-cpp-python's Python part must be importable (PYTHONPATH); LLAMA_CPP_LIB_PATH points it
# at the CUDA build's libllama.so.
set -uo pipefail
cmd=$1
case "$cmd" in
build)
    src=$2 dir=$3
    mkdir -p "$dir" && tar xJf "$src" -C "$dir" || exit 1
    # sm_90 only (Hopper): one architecture keeps the build to minutes.
    cmake -S "$dir/llama.cpp" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=ON -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" \
        -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
        -DGGML_CCACHE=OFF -DLLAMA_CURL=OFF || exit 1
    cmake --build "$dir/build" --target llama llama-server -j "$(nproc)" || exit 1
    touch "$dir/build/DONE"
    ;;
run)
    dir=$2 model=$3 out=$4
    mkdir -p "$out"
    export LLAMA_CPP_LIB_PATH="$dir/build/bin" CONTENOX_GPU_MODEL="$model"
    export PYTHONUNBUFFERED=1
    # CUDA graphs off: with them this build (CUDA 13.0, sm_90, H200) stopped with "an illegal
    # instruction was encountered" at cudaGraphLaunch in the settings with micro-batches of
    # 128; without, every setting ran clean.
    export GGML_CUDA_DISABLE_GRAPHS=1
    # The image's own pytest plugins stay unloaded: with them autoloaded the model load
    # crashed (SIGSEGV in llama_model_load_from_file); the test file needs none of them.
    export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    python3 -c "import llama_cpp; print('gpu offload:', llama_cpp.llama_supports_gpu_offload())"
    timeout "${CHECK_TIMEOUT:-200}" python3 -m contenox_bench.gpu_check --model "$model" \
        --out "$out" --server "$dir/build/bin/llama-server" 2>&1 | tail -n 40
    timeout "${TEST_TIMEOUT:-240}" python3 -m pytest -p contenox_bench.gpu_pytest \
        -p no:cacheprovider -o addopts="" -q tests/test_engine_exact.py >"$out/pytest.log" 2>&1
    echo "pytest exit $?"
    tail -n 25 "$out/pytest.log"
    ;;
*)
    echo "usage: $0 build SRC.tar.xz DIR | run DIR MODEL OUT" >&2
    exit 2
    ;;
esac
