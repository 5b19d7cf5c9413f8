# From open-mmlab/mmpretrain configs/resnet/resnet50_8xb32_in1k.py at ee7f2e88501f61aa95c742dd5f429f039935ee90 (unchanged but for this comment).
_base_ = [
    '../_base_/models/resnet50.py', '../_base_/datasets/imagenet_bs32.py',
    '../_base_/schedules/imagenet_bs256.py', '../_base_/default_runtime.py'
]
