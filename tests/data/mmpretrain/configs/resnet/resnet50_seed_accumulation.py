# mmpretrain's resnet50_8xb32_in1k.py (open-mmlab/mmpretrain at
# ee7f2e88501f61aa95c742dd5f429f039935ee90) with the gradient accumulation of
# MMEngine's "save GPU memory" page (open-mmlab/mmengine
# docs/en/common_usage/save_gpu_memory.md at 254342938d9bde1775c39ea7d5181c5d294026c4,
# the project's seed story 001): SGD, momentum 0.9, a step every 4 batches.
_base_ = ['./resnet50_8xb32_in1k.py']

optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='SGD', lr=0.001, momentum=0.9),
    accumulative_counts=4)
