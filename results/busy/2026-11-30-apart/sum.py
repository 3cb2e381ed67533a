import sys, statistics, collections
d=collections.defaultdict(list); order=[]
for line in open(sys.argv[1]):
    f=line.split()
    if len(f)!=5: continue
    load,rep,name,size,v=f
    k=(load,size); 
    if k not in order: order.append(k)
    d[(load,size,name)].append(float(v))
names=[]
for k in d:
    if k[2] not in names: names.append(k[2])
print("load size "+" ".join(names))
for load,size in order:
    row=[]
    for n in names:
        v=d.get((load,size,n),[])
        row.append("%.4g (%.3g-%.3g)"%(statistics.median(v),min(v),max(v)) if v else "-")
    print(load,size," | ".join(row))
