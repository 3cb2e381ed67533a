import sys, collections, statistics
d={}
for line in open(sys.argv[1]):
    np_,r,v,f,size,us=line.split()
    d[(r,v,f,size)]=float(us)
sizes=[]; rounds=sorted({k[0] for k in d}, key=int)
for k in d:
    if k[3] not in sizes: sizes.append(k[3])
for v in ["old","new"]:
    for s in sizes:
        rat=[d[(r,v,"exact",s)]/d[(r,v,"plain",s)] for r in rounds if (r,v,"exact",s) in d and (r,v,"plain",s) in d]
        ex=[d[(r,v,"exact",s)] for r in rounds if (r,v,"exact",s) in d]
        pl=[d[(r,v,"plain",s)] for r in rounds if (r,v,"plain",s) in d]
        print(v, s, "ratio median %.2f (%.2f-%.2f)"%(statistics.median(rat),min(rat),max(rat)), "exact %.4g-%.4g plain %.4g-%.4g"%(min(ex),max(ex),min(pl),max(pl)))
