# keel on an official PyTorch CUDA development image: its PyTorch provides
# LibTorch (found through KEEL_TORCH_PYTHON), its CUDA toolkit compiles our
# CUDA paths. Build and run:
#   docker build -t keel .
#   docker run --gpus all --rm -v "$PWD/runs:/keel/runs" keel            # default job
#   docker run --gpus all --rm keel ./build/keel train configs/gpt2-124m.yaml
ARG BASE=pytorch/pytorch:2.11.0-cuda13.0-cudnn9-devel
FROM ${BASE}

RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        build-essential cmake ninja-build pkg-config git zlib1g-dev libzstd-dev libpcre2-dev libutf8proc-dev \
        libyaml-cpp-dev libspdlog-dev libfmt-dev libsentencepiece-dev sentencepiece \
        libcli11-dev nlohmann-json3-dev libgtest-dev libgloo-dev \
    && rm -rf /var/lib/apt/lists/*

# Parquet sources: keel links the Arrow C++ libraries of the pyarrow wheel.
RUN python -m pip install --no-cache-dir pyarrow==26.0.1

WORKDIR /keel
COPY . .
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKEEL_TORCH_PYTHON="$(command -v python)" \
    && cmake --build build -j"$(nproc)"

CMD ["./build/keel", "train", "configs/default.yaml"]
