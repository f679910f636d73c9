package noderpc

import (
	"fmt"
	"net/netip"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/space-platform/space/internal/agent/gen/filesystempb"

	"github.com/space-platform/space/internal/network"
	"github.com/space-platform/space/internal/nodeapi"
	pb "github.com/space-platform/space/internal/noderpc/gen/nodev1"
	"github.com/space-platform/space/internal/runtime"
)

// Conversions between nodeapi's Go values and their wire messages. Every
// field of the Go structs has a counterpart; empty maps and slices come
// back as nil, the zero time as an unset timestamp.

func emptyMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

func emptySlice(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

func toTime(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func fromTime(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

func toTemplate(t nodeapi.TemplateSpec) *pb.TemplateSpec {
	return &pb.TemplateSpec{Id: t.ID, RootfsVolume: t.RootfsVolume, Env: t.Env, User: t.User, Workdir: t.Workdir, Start: t.Start, Ready: t.Ready, McpGateway: t.MCPGateway, Runtimes: t.Runtimes}
}

func fromTemplate(t *pb.TemplateSpec) nodeapi.TemplateSpec {
	return nodeapi.TemplateSpec{ID: t.GetId(), RootfsVolume: t.GetRootfsVolume(), Env: emptyMap(t.GetEnv()), User: t.GetUser(), Workdir: t.GetWorkdir(), Start: t.GetStart(), Ready: t.GetReady(), MCPGateway: t.GetMcpGateway(), Runtimes: emptySlice(t.GetRuntimes())}
}

func toLimits(l runtime.Limits) *pb.Limits {
	return &pb.Limits{Vcpus: int64(l.VCPUs), MemoryMb: int64(l.MemoryMB), Pids: int64(l.Pids)}
}

func fromLimits(l *pb.Limits) runtime.Limits {
	return runtime.Limits{VCPUs: int(l.GetVcpus()), MemoryMB: int(l.GetMemoryMb()), Pids: int(l.GetPids())}
}

func prefixStrings(ps []netip.Prefix) []string {
	if len(ps) == 0 {
		return nil
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

func parsePrefixes(ss []string) ([]netip.Prefix, error) {
	if len(ss) == 0 {
		return nil, nil
	}
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("network policy: %q is not a CIDR", s)
		}
		out[i] = p
	}
	return out, nil
}

func toPolicy(p network.Policy) *pb.Policy {
	return &pb.Policy{
		Offline:       p.Offline,
		AllowInternet: p.AllowInternet,
		Allow:         prefixStrings(p.Allow),
		Deny:          prefixStrings(p.Deny),
		Limits:        &pb.NetworkLimits{BandwidthMbit: int64(p.Limits.BandwidthMbit), MaxConnections: int64(p.Limits.MaxConnections)},
		AllowDomains:  p.AllowDomains,
		DenyDomains:   p.DenyDomains,
		InspectHttp:   p.InspectHTTP,
		Hold:          p.Hold,
	}
}

func fromPolicy(p *pb.Policy) (network.Policy, error) {
	allow, err := parsePrefixes(p.GetAllow())
	if err != nil {
		return network.Policy{}, err
	}
	deny, err := parsePrefixes(p.GetDeny())
	if err != nil {
		return network.Policy{}, err
	}
	return network.Policy{
		Offline:       p.GetOffline(),
		AllowInternet: p.GetAllowInternet(),
		Allow:         allow,
		Deny:          deny,
		Limits:        network.Limits{BandwidthMbit: int(p.GetLimits().GetBandwidthMbit()), MaxConnections: int(p.GetLimits().GetMaxConnections())},
		AllowDomains:  emptySlice(p.GetAllowDomains()),
		DenyDomains:   emptySlice(p.GetDenyDomains()),
		InspectHTTP:   p.GetInspectHttp(),
		Hold:          p.GetHold(),
	}, nil
}

func toIdentity(id nodeapi.Identity) *pb.Identity {
	return &pb.Identity{AccessToken: id.AccessToken, Env: id.Env, Info: id.Info}
}

func fromIdentity(id *pb.Identity) nodeapi.Identity {
	return nodeapi.Identity{AccessToken: id.GetAccessToken(), Env: emptyMap(id.GetEnv()), Info: emptyMap(id.GetInfo())}
}

func toCreateSpec(s nodeapi.CreateSpec) *pb.CreateSpec {
	return &pb.CreateSpec{Id: s.ID, Template: toTemplate(s.Template), Limits: toLimits(s.Limits), DiskMb: int64(s.DiskMB), Env: s.Env, AccessToken: s.AccessToken, Network: toPolicy(s.Network), Mounts: toMounts(s.Mounts), Runtime: s.Runtime}
}

func fromCreateSpec(s *pb.CreateSpec) (nodeapi.CreateSpec, error) {
	pol, err := fromPolicy(s.GetNetwork())
	if err != nil {
		return nodeapi.CreateSpec{}, err
	}
	return nodeapi.CreateSpec{ID: s.GetId(), Template: fromTemplate(s.GetTemplate()), Limits: fromLimits(s.GetLimits()), DiskMB: int(s.GetDiskMb()), Env: emptyMap(s.GetEnv()), AccessToken: s.GetAccessToken(), Network: pol, Mounts: fromMounts(s.GetMounts()), Runtime: s.GetRuntime()}, nil
}

func toPoolLimits(l nodeapi.PoolLimits) *pb.PoolLimits {
	return &pb.PoolLimits{Limits: toLimits(l.Limits), DiskMb: int64(l.DiskMB)}
}

func fromPoolLimits(l *pb.PoolLimits) nodeapi.PoolLimits {
	return nodeapi.PoolLimits{Limits: fromLimits(l.GetLimits()), DiskMB: int(l.GetDiskMb())}
}

func toRestoreSpec(s nodeapi.RestoreSpec) *pb.RestoreSpec {
	out := &pb.RestoreSpec{Id: s.ID, Image: s.Image, FromVolume: s.FromVolume, Limits: toLimits(s.Limits), DiskMb: int64(s.DiskMB), AccessToken: s.AccessToken, Network: toPolicy(s.Network), Rollback: s.Rollback, Mounts: toMounts(s.Mounts), Runtime: s.Runtime}
	if s.NewIdentity != nil {
		out.NewIdentity = toIdentity(*s.NewIdentity)
	}
	return out
}

func fromRestoreSpec(s *pb.RestoreSpec) (nodeapi.RestoreSpec, error) {
	pol, err := fromPolicy(s.GetNetwork())
	if err != nil {
		return nodeapi.RestoreSpec{}, err
	}
	out := nodeapi.RestoreSpec{ID: s.GetId(), Image: s.GetImage(), FromVolume: s.GetFromVolume(), Limits: fromLimits(s.GetLimits()), DiskMB: int(s.GetDiskMb()), AccessToken: s.GetAccessToken(), Network: pol, Rollback: s.GetRollback(), Mounts: fromMounts(s.GetMounts()), Runtime: s.GetRuntime()}
	if s.NewIdentity != nil {
		id := fromIdentity(s.NewIdentity)
		out.NewIdentity = &id
	}
	return out, nil
}

func toPoolStatus(p nodeapi.PoolStatus) *pb.PoolStatus {
	return &pb.PoolStatus{Size: int64(p.Size), Ready: int64(p.Ready)}
}

func fromPoolStatus(p *pb.PoolStatus) nodeapi.PoolStatus {
	return nodeapi.PoolStatus{Size: int(p.GetSize()), Ready: int(p.GetReady())}
}

func toInfo(i nodeapi.Info) *pb.InfoResponse {
	out := &pb.InfoResponse{Id: i.ID, Vcpus: int64(i.VCPUs), MemoryMb: int64(i.MemoryMB), DiskMb: int64(i.DiskMB), Sandboxes: int64(i.Sandboxes), DiskFreeMb: int64(i.DiskFreeMB), MemoryFreeMb: int64(i.MemoryFreeMB), VcpusCommitted: int64(i.VCPUsCommitted), MemoryCommittedMb: int64(i.MemoryCommittedMB), Templates: i.Templates, TemplateImages: i.TemplateImages, Runtimes: i.Runtimes}
	if len(i.Pools) > 0 {
		out.Pools = make(map[string]*pb.PoolStatus, len(i.Pools))
		for k, v := range i.Pools {
			out.Pools[k] = toPoolStatus(v)
		}
	}
	return out
}

func fromInfo(i *pb.InfoResponse) nodeapi.Info {
	out := nodeapi.Info{ID: i.GetId(), VCPUs: int(i.GetVcpus()), MemoryMB: int(i.GetMemoryMb()), DiskMB: int(i.GetDiskMb()), Sandboxes: int(i.GetSandboxes()), DiskFreeMB: int(i.GetDiskFreeMb()), MemoryFreeMB: int(i.GetMemoryFreeMb()), VCPUsCommitted: int(i.GetVcpusCommitted()), MemoryCommittedMB: int(i.GetMemoryCommittedMb()), Templates: emptySlice(i.GetTemplates()), TemplateImages: emptySlice(i.GetTemplateImages()), Runtimes: emptyMap(i.GetRuntimes())}
	if len(i.GetPools()) > 0 {
		out.Pools = make(map[string]nodeapi.PoolStatus, len(i.GetPools()))
		for k, v := range i.GetPools() {
			out.Pools[k] = fromPoolStatus(v)
		}
	}
	return out
}

func toEvent(e nodeapi.Event) *pb.Event {
	out := &pb.Event{Type: string(e.Type), Time: toTime(e.Time), Sandbox: e.Sandbox, Reason: e.Reason, TemplateId: e.TemplateID}
	if e.Pool != nil {
		out.Pool = toPoolStatus(*e.Pool)
	}
	return out
}

func fromEvent(e *pb.Event) nodeapi.Event {
	out := nodeapi.Event{Type: nodeapi.EventType(e.GetType()), Time: fromTime(e.GetTime()), Sandbox: e.GetSandbox(), Reason: e.GetReason(), TemplateID: e.GetTemplateId()}
	if e.Pool != nil {
		p := fromPoolStatus(e.Pool)
		out.Pool = &p
	}
	return out
}

func toSessionSpec(s nodeapi.SessionSpec) *pb.SessionSpec {
	return &pb.SessionSpec{Cmd: s.Cmd, Env: s.Env, Cwd: s.Cwd, User: s.User, Tty: s.TTY, Cols: s.Cols, Rows: s.Rows, Stdin: s.Stdin, Tag: s.Tag}
}

func fromSessionSpec(s *pb.SessionSpec) nodeapi.SessionSpec {
	return nodeapi.SessionSpec{Cmd: emptySlice(s.GetCmd()), Env: emptyMap(s.GetEnv()), Cwd: s.GetCwd(), User: s.GetUser(), TTY: s.GetTty(), Cols: s.GetCols(), Rows: s.GetRows(), Stdin: s.GetStdin(), Tag: s.GetTag()}
}

func toEnd(e *nodeapi.End) *pb.End {
	if e == nil {
		return nil
	}
	return &pb.End{ExitCode: int64(e.ExitCode), Error: e.Error}
}

func fromEnd(e *pb.End) *nodeapi.End {
	if e == nil {
		return nil
	}
	return &nodeapi.End{ExitCode: int(e.GetExitCode()), Error: e.GetError()}
}

func toSessionInfo(s nodeapi.SessionInfo) *pb.SessionInfo {
	return &pb.SessionInfo{Id: s.ID, Pid: s.PID, Spec: toSessionSpec(s.Spec), StartedAt: toTime(s.StartedAt), EndedAt: toTime(s.EndedAt), End: toEnd(s.End), OutputBytes: s.OutputBytes, DroppedBytes: s.DroppedBytes}
}

func fromSessionInfo(s *pb.SessionInfo) nodeapi.SessionInfo {
	return nodeapi.SessionInfo{ID: s.GetId(), PID: s.GetPid(), Spec: fromSessionSpec(s.GetSpec()), StartedAt: fromTime(s.GetStartedAt()), EndedAt: fromTime(s.GetEndedAt()), End: fromEnd(s.GetEnd()), OutputBytes: s.GetOutputBytes(), DroppedBytes: s.GetDroppedBytes()}
}

type pbEntry = filesystempb.EntryInfo

func durationNanos(ns int64) time.Duration { return time.Duration(ns) }

func toMetricSample(m nodeapi.MetricSample) *pb.MetricSample {
	return &pb.MetricSample{
		Time: timestamppb.New(m.Time), CpuCount: int64(m.CPUCount), CpuUsedPct: m.CPUUsedPct,
		MemUsed: m.MemUsed, MemTotal: m.MemTotal, MemCache: m.MemCache, DiskUsed: m.DiskUsed, DiskTotal: m.DiskTotal,
	}
}

func fromMetricSample(m *pb.MetricSample) nodeapi.MetricSample {
	return nodeapi.MetricSample{
		Time: m.GetTime().AsTime(), CPUCount: int(m.GetCpuCount()), CPUUsedPct: m.GetCpuUsedPct(),
		MemUsed: m.GetMemUsed(), MemTotal: m.GetMemTotal(), MemCache: m.GetMemCache(), DiskUsed: m.GetDiskUsed(), DiskTotal: m.GetDiskTotal(),
	}
}

func toMounts(ms []nodeapi.VolumeMount) []*pb.VolumeMount {
	var out []*pb.VolumeMount
	for _, m := range ms {
		out = append(out, &pb.VolumeMount{Volume: m.Volume, Path: m.Path, ReadOnly: m.ReadOnly})
	}
	return out
}

func fromMounts(ms []*pb.VolumeMount) []nodeapi.VolumeMount {
	var out []nodeapi.VolumeMount
	for _, m := range ms {
		out = append(out, nodeapi.VolumeMount{Volume: m.GetVolume(), Path: m.GetPath(), ReadOnly: m.GetReadOnly()})
	}
	return out
}

func toVolumeEdit(e nodeapi.VolumeEdit) *pb.VolumeEdit {
	return &pb.VolumeEdit{Volume: e.Volume, Path: e.Path, Op: e.Op, Parents: e.Parents, Uid: e.UID, Gid: e.GID, Mode: e.Mode}
}

func fromVolumeEdit(e *pb.VolumeEdit) nodeapi.VolumeEdit {
	return nodeapi.VolumeEdit{Volume: e.GetVolume(), Path: e.GetPath(), Op: e.GetOp(), Parents: e.GetParents(), UID: e.Uid, GID: e.Gid, Mode: e.Mode}
}
