"""One rank of torch.distributed over NCCL: N all-reduces of a float32 tensor on the GPU, then a
synchronize. For gpu-check.sh: the trace must hold every ncclAllReduce with its nccl_calls row.

    python3 nccl_one_rank.py [N] [MiB]
"""
import os
import sys
import tempfile

import torch
import torch.distributed as dist


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    mib = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    store = tempfile.NamedTemporaryFile(prefix="causeway-nccl-", delete=False).name
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    x = torch.ones(mib * (1 << 20) // 4, device="cuda")
    for _ in range(n):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    print(f"ALLREDUCES {n}")
    print(f"NCCL_VERSION {'.'.join(map(str, torch.cuda.nccl.version()))}")
    dist.destroy_process_group()
    os.unlink(store)


if __name__ == "__main__":
    main()
