# An XTuner LLaVA fine-tuning config as the seed story ran it (24 GB GPU,
# `xtuner train CONFIG --deepspeed deepspeed_zero2_offload`). Written for headroom's
# tests from the keys and values of SmartFlowAI/Llama3-Tutorial
# configs/llama3-llava/llava_llama3_8b_instruct_qlora_clip_vit_large_p14_336_lora_e1_finetune.py
# (commit 9ecb4ad), which follows XTuner's
# xtuner/configs/llava/llama3_8b_instruct_clip_vit_large_p14_336/finetune/
# llava_llama3_8b_instruct_qlora_clip_vit_large_p14_336_e1_gpu1_finetune.py. MMEngine
# reads it in lazy-import mode: none of the imported packages must be installed.
import torch
from mmengine.hooks import CheckpointHook, IterTimerHook, LoggerHook
from mmengine.optim import AmpOptimWrapper, CosineAnnealingLR, LinearLR
from peft import LoraConfig
from torch.optim import AdamW
from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig, CLIPImageProcessor, CLIPVisionModel

from xtuner.dataset import LLaVADataset
from xtuner.dataset.collate_fns import default_collate_fn
from xtuner.dataset.map_fns import llava_map_fn, template_map_fn_factory
from xtuner.dataset.samplers import LengthGroupedSampler
from xtuner.engine.runner import TrainLoop
from xtuner.model import LLaVAModel
from xtuner.utils import PROMPT_TEMPLATE

# Settings
llm_name_or_path = '/root/share/new_models/meta-llama/Meta-Llama-3-8B-Instruct'
visual_encoder_name_or_path = '/root/share/new_models/openai/clip-vit-large-patch14-336'
pretrained_pth = '/root/share/new_models/xtuner/llama3-llava-iter_2181.pth'
data_root = '/root/tutorial/xtuner/llava/llava_data/'
prompt_template = PROMPT_TEMPLATE.llama3_chat
max_length = int(2048 - (336 / 14)**2)  # 1472 text tokens; 576 image tokens join them
batch_size = 1  # per device
accumulative_counts = 1
max_epochs = 1
lr = 2e-4
save_steps = 500
save_total_limit = 2

tokenizer = dict(type=AutoTokenizer.from_pretrained, pretrained_model_name_or_path=llm_name_or_path,
                 trust_remote_code=True, padding_side='right')
image_processor = dict(type=CLIPImageProcessor.from_pretrained,
                       pretrained_model_name_or_path=visual_encoder_name_or_path, trust_remote_code=True)

model = dict(
    type=LLaVAModel,
    freeze_llm=True,
    freeze_visual_encoder=True,
    pretrained_pth=pretrained_pth,
    llm=dict(
        type=AutoModelForCausalLM.from_pretrained,
        pretrained_model_name_or_path=llm_name_or_path,
        trust_remote_code=True,
        torch_dtype=torch.float16,
        quantization_config=dict(
            type=BitsAndBytesConfig,
            load_in_4bit=True,
            load_in_8bit=False,
            llm_int8_threshold=6.0,
            llm_int8_has_fp16_weight=False,
            bnb_4bit_compute_dtype=torch.float16,
            bnb_4bit_use_double_quant=True,
            bnb_4bit_quant_type='nf4')),
    llm_lora=dict(type=LoraConfig, r=512, lora_alpha=256, lora_dropout=0.05, bias='none', task_type='CAUSAL_LM'),
    visual_encoder=dict(type=CLIPVisionModel.from_pretrained, pretrained_model_name_or_path=visual_encoder_name_or_path),
    visual_encoder_lora=dict(type=LoraConfig, r=64, lora_alpha=16, lora_dropout=0.05, bias='none'))

llava_dataset = dict(
    type=LLaVADataset,
    data_path=data_root + 'repeated_data.json',
    image_folder=data_root,
    tokenizer=tokenizer,
    image_processor=image_processor,
    dataset_map_fn=llava_map_fn,
    template_map_fn=dict(type=template_map_fn_factory, template=prompt_template),
    max_length=max_length,
    pad_image_to_square=True)

train_dataloader = dict(
    batch_size=batch_size,
    num_workers=0,
    dataset=llava_dataset,
    sampler=dict(type=LengthGroupedSampler, length_property='modality_length',
                 per_device_batch_size=batch_size * accumulative_counts),
    collate_fn=dict(type=default_collate_fn))

optim_wrapper = dict(
    type=AmpOptimWrapper,
    optimizer=dict(type=AdamW, lr=lr, betas=(0.9, 0.999), weight_decay=0),
    clip_grad=dict(max_norm=1, error_if_nonfinite=False),
    accumulative_counts=accumulative_counts,
    loss_scale='dynamic',
    dtype='float16')

param_scheduler = [
    dict(type=LinearLR, start_factor=1e-5, by_epoch=True, begin=0, end=0.03 * max_epochs, convert_to_iter_based=True),
    dict(type=CosineAnnealingLR, eta_min=0.0, by_epoch=True, begin=0.03 * max_epochs, end=max_epochs,
         convert_to_iter_based=True),
]
train_cfg = dict(type=TrainLoop, max_epochs=max_epochs)

default_hooks = dict(
    timer=dict(type=IterTimerHook),
    logger=dict(type=LoggerHook, log_metric_by_epoch=False, interval=10),
    checkpoint=dict(type=CheckpointHook, by_epoch=False, interval=save_steps, max_keep_ckpts=save_total_limit))
env_cfg = dict(cudnn_benchmark=False, dist_cfg=dict(backend='nccl'))
visualizer = None
log_level = 'INFO'
load_from = None
resume = False
randomness = dict(seed=None, deterministic=False)
log_processor = dict(by_epoch=False)
