import numpy as np, vkcore, time
r=np.random.default_rng(0)
def numpy_attn(q,k,v,causal=False):
    G=q.shape[1]//k.shape[1]
    k=np.repeat(k,G,1); v=np.repeat(v,G,1)
    s=q@k.swapaxes(-1,-2)*np.float32(1/np.sqrt(q.shape[-1]))
    if causal:
        L=s.shape[-1]; s=np.where(np.tri(s.shape[-2],L,L-s.shape[-2],dtype=bool),s,-np.inf)
    s=np.exp(s-s.max(-1,keepdims=True)); s/=s.sum(-1,keepdims=True)
    return s@v
def best(f,n=5):
    t=[]
    for _ in range(n):
        a=time.perf_counter(); f(); t.append(time.perf_counter()-a)
    return min(t)
c=vkcore.KVCache(8,128,4096,dtype="float16")
k=r.standard_normal((8,4096,128)).astype(np.float32); v=r.standard_normal((8,4096,128)).astype(np.float32)
c.append(k,v)
q=r.standard_normal((32,1,128)).astype(np.float32)
qt=vkcore.asarray(q)
vkcore.attention(qt,c)
print("decode vk", best(lambda: vkcore.attention(qt,c)))
print("decode np", best(lambda: numpy_attn(q[None],k[None],v[None])))
q=r.standard_normal((8,1024,64)).astype(np.float32); k=r.standard_normal((8,1024,64)).astype(np.float32); v=r.standard_normal((8,1024,64)).astype(np.float32)
qt,kt,vt=[vkcore.asarray(x) for x in (q,k,v)]
vkcore.attention(qt,kt,vt,causal=True)
print("prefill vk", best(lambda: vkcore.attention(qt,kt,vt,causal=True),3))
print("prefill vk numpy io", best(lambda: vkcore.attention(q,k,v,causal=True),3))
print("prefill np", best(lambda: numpy_attn(q,k,v,True),3))
