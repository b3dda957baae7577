#!/usr/bin/env bash
# Records the CUDA traces of tests/data/kineto/h200/ with `perfledger record` on a machine with one
# NVIDIA GPU: the example CNN trained (default and full level), the example inference, the
# data-parallel example as two NCCL ranks, and a small transformer's training step
# (tests/programs/llm_step.py) eager, replayed as one CUDA graph, and through torch.compile.
# Run from the repository root with perfledger installed:
#
#     bash tests/data/record_cuda.sh OUTDIR [NAME ...]
#
# NAMEs (train infer full ddp llm llm_graphs llm_compile) record those runs only.
# Each run's terminal output goes to OUTDIR/record.log, the GPU and library versions to
# OUTDIR/gpu.txt, each profile to OUTDIR/<name>/.
#
# Two NCCL ranks on one GPU: NCCL refuses two ranks of one host on the same device ("Duplicate GPU
# detected"), and a host is what NCCL_HOSTID says it is. Each rank gets its own NCCL_HOSTID, so
# the two ranks share the GPU and talk through NCCL's socket transport on the loopback interface,
# as two hosts would over Ethernet. With several GPUs, run the example with torchrun instead:
#     perfledger record -- torchrun --nproc-per-node 2 examples/train_ddp.py --epochs 1
set -u
out=${1:?usage: bash tests/data/record_cuda.sh OUTDIR [NAME ...]}
shift
wanted=" ${*:-train infer full ddp llm llm_graphs llm_compile} "
py=${PYTHON:-python3}
mkdir -p "$out"
log="$out/record.log"

run() {
    local name=$1
    shift
    [[ $wanted == *" $name "* ]] || return 0
    echo "=== $name: $*" >>"$log"
    local started=$SECONDS
    "$py" -m perfledger record -o "$out/$name" --force "$@" >>"$log" 2>&1
    local rc=$?
    echo "=== $name: exit $rc after $((SECONDS - started)) s" >>"$log"
    return $rc
}

{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    "$py" -c 'import sys, torch; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())))'
} >"$out/gpu.txt" 2>&1

run train --label "train_cnn width 64, one GPU" -- \
    "$py" examples/train_cnn.py --epochs 1 --width 64 --workers 2
run infer --label "infer_cnn, one GPU" -- "$py" examples/infer_cnn.py --batches 12
run full --level full --steps 3 --label "train_cnn, full level" -- \
    "$py" examples/train_cnn.py --epochs 1 --preprocessed
run ddp --label "train_ddp, 2 NCCL ranks on one GPU" -- bash -c '
    export MASTER_ADDR=127.0.0.1 MASTER_PORT=29533 WORLD_SIZE=2 LOCAL_RANK=0
    export NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=WARN
    for rank in 0 1; do
        RANK=$rank NCCL_HOSTID=perfledger-rank$rank '"$py"' examples/train_ddp.py --epochs 1 &
    done
    status=0
    for job in $(jobs -p); do wait "$job" || status=1; done
    exit $status'
run llm --label "transformer step, eager" -- "$py" tests/programs/llm_step.py
run llm_graphs --label "transformer step, one CUDA graph" -- \
    "$py" tests/programs/llm_step.py --graphs
run llm_compile --label "transformer step, torch.compile" -- \
    "$py" tests/programs/llm_step.py --compile
echo "done" >>"$log"
