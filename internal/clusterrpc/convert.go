package clusterrpc

import (
	pb "github.com/space-platform/space/internal/clusterrpc/gen/clusterv1"
	"github.com/space-platform/space/internal/cpapi"
	"github.com/space-platform/space/internal/nodeapi"
	nodepb "github.com/space-platform/space/internal/noderpc/gen/nodev1"
)

func toInfo(i nodeapi.Info) *nodepb.InfoResponse {
	out := &nodepb.InfoResponse{
		Id: i.ID, Vcpus: int64(i.VCPUs), MemoryMb: int64(i.MemoryMB), DiskMb: int64(i.DiskMB),
		Sandboxes: int64(i.Sandboxes), DiskFreeMb: int64(i.DiskFreeMB), MemoryFreeMb: int64(i.MemoryFreeMB),
		VcpusCommitted: int64(i.VCPUsCommitted), MemoryCommittedMb: int64(i.MemoryCommittedMB),
		Templates: i.Templates, TemplateImages: i.TemplateImages, Runtimes: i.Runtimes,
	}
	for k, v := range i.Pools {
		if out.Pools == nil {
			out.Pools = map[string]*nodepb.PoolStatus{}
		}
		out.Pools[k] = &nodepb.PoolStatus{Size: int64(v.Size), Ready: int64(v.Ready)}
	}
	return out
}

func fromInfo(i *nodepb.InfoResponse) nodeapi.Info {
	out := nodeapi.Info{
		ID: i.GetId(), VCPUs: int(i.GetVcpus()), MemoryMB: int(i.GetMemoryMb()), DiskMB: int(i.GetDiskMb()),
		Sandboxes: int(i.GetSandboxes()), DiskFreeMB: int(i.GetDiskFreeMb()), MemoryFreeMB: int(i.GetMemoryFreeMb()),
		VCPUsCommitted: int(i.GetVcpusCommitted()), MemoryCommittedMB: int(i.GetMemoryCommittedMb()),
		Templates: i.GetTemplates(), TemplateImages: i.GetTemplateImages(), Runtimes: i.GetRuntimes(),
	}
	for k, v := range i.GetPools() {
		if out.Pools == nil {
			out.Pools = map[string]nodeapi.PoolStatus{}
		}
		out.Pools[k] = nodeapi.PoolStatus{Size: int(v.GetSize()), Ready: int(v.GetReady())}
	}
	return out
}

func toTemplates(ts []cpapi.Template) []*pb.Template {
	out := make([]*pb.Template, 0, len(ts))
	for _, t := range ts {
		s := t.Spec
		out = append(out, &pb.Template{Name: t.Name, Spec: &nodepb.TemplateSpec{
			Id: s.ID, RootfsVolume: s.RootfsVolume, Env: s.Env, User: s.User, Workdir: s.Workdir, Start: s.Start, Ready: s.Ready,
			Runtimes: s.Runtimes,
		}})
	}
	return out
}

func fromTemplates(ts []*pb.Template) []cpapi.Template {
	out := make([]cpapi.Template, 0, len(ts))
	for _, t := range ts {
		s := t.GetSpec()
		out = append(out, cpapi.Template{Name: t.GetName(), Spec: nodeapi.TemplateSpec{
			ID: s.GetId(), RootfsVolume: s.GetRootfsVolume(), Env: s.GetEnv(), User: s.GetUser(), Workdir: s.GetWorkdir(),
			Start: s.GetStart(), Ready: s.GetReady(), Runtimes: s.GetRuntimes(),
		}})
	}
	return out
}
