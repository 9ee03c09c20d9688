#!/usr/bin/env bash
# The engine plug-ins against the real engines' Python classes, on a CPU-only machine: a
# virtual environment with torch (the registry's CUDA build: there is no CPU-only torch on the
# Python registry; it runs CPU tensors), sglang==0.5.23 and vllm==0.33.0 (--no-deps: their
# GPU kernels do not install or run here) plus the pure-Python packages their modules import,
# and the tandem-kv wheel. Then scripts/engine_compat.py starts a `tandem up` cluster and
# drives tandem.sglang through SGLang's StorageBackendFactory and tandem.vllm through vLLM's
# KVConnectorFactory as far as a machine without a GPU allows (see docs/ENGINES.md).
#
# Not part of scripts/test.sh or CI: it downloads about 6 GB. Needs python3 with venv,
# redis-server and the tandem binary (--bin PATH, default target/debug/tandem).
#   scripts/engine-compat.sh [--bin PATH] [--venv DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=target/debug/tandem
venv=${COMPAT_VENV:-target/engine-compat-venv}
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin="$2"; shift 2 ;;
    --venv) venv="$2"; shift 2 ;;
    *) echo "usage: $0 [--bin PATH] [--venv DIR]" >&2; exit 2 ;;
  esac
done
python="${PYTHON:-python3}"
mkdir -p "$(dirname "$venv")"
free_gb=$(df -Pk "$(dirname "$venv")" | awk 'NR==2 {print int($4 / 1048576)}')
if [ ! -x "$venv/bin/python" ] && [ "$free_gb" -lt 12 ]; then
  echo "SKIP: $free_gb GB free under $(dirname "$venv"); the engines' venv needs about 12 GB"
  exit 0
fi
pip() { "$venv/bin/pip" install -q --disable-pip-version-check "$@" 2>&1 | grep -v "requires\|resolver" || true; }
t0=$(date +%s)
if [ ! -x "$venv/bin/python" ]; then "$python" -m venv "$venv"; fi
# sglang 0.5.23 pins torch 2.14.1 and vllm 0.33.0 pins 2.14.0: one environment takes SGLang's.
pip torch==2.14.1
pip --no-deps sglang==0.5.23 vllm==0.33.0
# What the imported modules need (from the two wheels' requirements, pure Python or small).
pip numpy msgspec "transformers>=5.16.1,<5.21.0" pydantic pyyaml cachetools psutil regex requests \
  tqdm cloudpickle pyzmq blake3 sentencepiece "fastapi<0.137" orjson prometheus_client pybase64 \
  setproctitle einops cbor2 py-cpuinfo pillow IPython aiohttp "anthropic>=0.71" "openai>=2.25" \
  partial_json_parser python-multipart "uvicorn>=0.51" uvloop xxhash zstandard "python-dateutil<3" \
  distro easydict interegular scipy tiktoken watchfiles jsonschema "lark==1.2.2" protobuf \
  python-json-logger prometheus-fastapi-instrumentator ijson multidict ninja "oss-harmony>=0.0.11" \
  xgrammar llguidance maturin==1.16.0 pytest==9.2.0
t1=$(date +%s)
wheels=target/engine-compat-wheels
rm -rf "$wheels"
"$venv/bin/maturin" build -q --locked --profile dev -m crates/tandem-py/Cargo.toml -o "$wheels"
"$venv/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps "$wheels"/tandem_kv-*.whl
t2=$(date +%s)
"$venv/bin/python" -c "import torch, sglang, vllm; print('torch', torch.__version__, '| sglang', sglang.__version__, '| vllm', vllm.__version__)" 2>/dev/null | tail -1
TANDEM_BIN="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")" "$venv/bin/python" scripts/engine_compat.py
t3=$(date +%s)
echo "engine-compat: venv $((t1 - t0)) s, wheel $((t2 - t1)) s, drive $((t3 - t2)) s ($(date -u +%Y-%m-%d))"
