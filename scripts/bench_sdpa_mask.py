"""Time torch SDPA forward and forward + backward the way transformers calls it in training, on a CUDA GPU:
is_causal=True with no mask; an explicit boolean causal mask (batch, 1, s, s), the batch dimension an expanded view,
as masking_utils.sdpa_mask builds it; and a sliding-window mask (2,047 at 2,048 tokens as Phi-3-mini; 1,024 at 4,096
as Gemma-3's local layers). Also forces FlashAttention-2 on the causal call and the memory-efficient kernel on the
masked one (what torch picks where cuDNN is not preferred). Head dims 64/96/128/256 (32, 32, 32, 8 heads), 8,192
tokens a call, bf16, equal query and KV heads (transformers repeat_kv's K/V whenever it passes a mask). Records the
backend torch chooses (torch._fused_sdp_choice) and the attention kernels one profiled step launched.

    OUT=/tmp python3 scripts/bench_sdpa_mask.py        # writes $OUT/sdpa_mask.csv

Kept terse: the lent machine runs a copy of the main branch, so this ran inline under a 2,000-character command
(validation/device/h200-2026-12-04c-sdpa_mask.csv, torch 2.11.0+cu130, cuDNN 9.19, H200). Times are milliseconds
per call (CUDA events, 10 calls after 2 warm-ups); rates are derived in estimate/data/attention_kernels.csv.
"""
import csv,os,contextlib as C,torch,torch.nn.functional as F
from torch.nn.attention import SDPBackend as B,sdpa_kernel
from torch.profiler import profile,ProfilerActivity as A
Y=torch.cuda.synchronize
def tm(fn,n=10):
 for _ in range(2):fn()
 E=lambda:torch.cuda.Event(enable_timing=True);s,e=E(),E();Y();s.record()
 for _ in range(n):fn()
 e.record();Y();return s.elapsed_time(e)/n
R=[]
for d,h in((64,32),(96,32),(128,32),(256,8)):
 for s in(2048,4096):
  b=8192//s;q,k,v=(torch.randn(b,h,s,d,device='cuda',dtype=torch.bfloat16,requires_grad=True)for _ in'qkv');g=torch.randn_like(q)
  i=torch.arange(s,device='cuda');c=i[None]<=i[:,None];w={2048:2047,4096:1024}[s];W=c&(i[None]>i[:,None]-w)
  for n,m,ic,f in(('is_causal',None,1,None),('is_causal',None,1,B.FLASH_ATTENTION),('causal_mask',c,0,None),('causal_mask',c,0,B.EFFICIENT_ATTENTION),('window_mask',W,0,None)):
   M=None if m is None else m[None,None].expand(b,1,s,s)
   fw=lambda:F.scaled_dot_product_attention(q,k,v,attn_mask=M,is_causal=bool(ic))
   fb=lambda:fw().backward(g)
   r=dict(case=n,forced=f.name if f else '',batch=b,heads=h,seq_len=s,head_dim=d,window=w if m is W else '')
   try:
    r['chosen']=f.name if f else B(torch._fused_sdp_choice(q,k,v,M,0.0,bool(ic))).name
    with sdpa_kernel([f]) if f else C.nullcontext():
     r['fwd_ms']=tm(fw);r['fwd_bwd_ms']=tm(fb)
     with profile(activities=[A.CUDA]) as p:fb();Y()
    r['kernels']='|'.join(sorted({e.key[:90] for e in p.events() if any(t in e.key.lower() for t in('sdpa','fmha','flash'))}))[:400]
   except Exception as x:r['error']=repr(x)[:99]
   print(r,flush=True);R.append(r)
  del q,k,v
K=['case','forced','chosen','batch','heads','seq_len','head_dim','window','fwd_ms','fwd_bwd_ms','kernels','error']
with open(os.environ.get('OUT','.')+'/sdpa_mask.csv','w') as o:
 o.write(f"# {torch.cuda.get_device_name()} torch {torch.__version__} cudnn {torch.backends.cudnn.version()}\n");x=csv.DictWriter(o,K);x.writeheader();x.writerows(R)
