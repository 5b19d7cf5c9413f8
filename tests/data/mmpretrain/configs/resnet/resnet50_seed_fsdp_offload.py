# mmpretrain's resnet50_8xb32_in1k.py with the FSDP wrapper of MMEngine's "save
# GPU memory" page (open-mmlab/mmengine docs/en/common_usage/save_gpu_memory.md at
# 254342938d9bde1775c39ea7d5181c5d294026c4, the project's seed story 001).
_base_ = ['./resnet50_8xb32_in1k.py']

model_wrapper_cfg = dict(type='MMFullyShardedDataParallel', cpu_offload=True)
