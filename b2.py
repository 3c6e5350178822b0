import numpy as np, vkcore, time
r=np.random.default_rng(0)
dev=vkcore.default_device()
def best(f,n=5):
    t=[]
    for _ in range(n):
        a=time.perf_counter(); f(); t.append(time.perf_counter()-a)
    return min(t)
for d,dv in [(16,16),(128,16),(16,128),(128,128)]:
    for dt in ["float32","float16"]:
        c=vkcore.KVCache(8,d,4096,dtype=dt)
        k=r.standard_normal((8,4096,d)).astype(np.float32)
        c.append(k,k)
        qt=vkcore.asarray(r.standard_normal((32,1,d)).astype(np.float32))
        vkcore.attention(qt,c)
        print(d,dv,dt, best(lambda: vkcore.attention(qt,c).numpy()))
        c.release()
