# mmpretrain's resnet50_8xb32_in1k.py with the memory options mmpretrain's ResNet
# and MMEngine's AmpOptimWrapper take (mmpretrain/models/backbones/resnet.py,
# mmengine/optim/optimizer/amp_optimizer_wrapper.py): bf16 autocast, every
# Bottleneck checkpointed, the stem and stage 1 frozen, AdamW, batch 64 at 192 px,
# two checkpoints kept.
_base_ = ['./resnet50_8xb32_in1k.py']

model = dict(backbone=dict(with_cp=True, frozen_stages=1, norm_eval=True))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='RandomResizedCrop', scale=192),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]
train_dataloader = dict(batch_size=64, dataset=dict(pipeline=train_pipeline))
optim_wrapper = dict(
    _delete_=True,
    type='AmpOptimWrapper',
    dtype='bfloat16',
    optimizer=dict(type='AdamW', lr=0.001, weight_decay=0.05),
    accumulative_counts=2)
default_hooks = dict(checkpoint=dict(max_keep_ckpts=2))
