package redteam

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
)

// stormBuildSeconds is how long each of the storm's builds runs.
const stormBuildSeconds = 20

func buildStormAttack() ServerAttack {
	return ServerAttack{
		Name: "build storm past the project's quota", Timeout: 4 * time.Minute,
		Checks: []Check{{Name: "build storm past the project's quota",
			Expected: "429 for every build while the project holds its whole sandbox quota",
			Escape:   "builds running outside the project's quotas: sandboxes of a gigabyte or more for up to an hour, charged to nobody"}},
		Run: func(ctx context.Context, t *tenant) []Verdict { return []Verdict{t.buildStorm(ctx)} },
	}
}

// buildStorm fills the project's quota with sandboxes (until a create
// answers 429, at most MaxSandboxes), then submits Builds builds at
// once. A build is a sandbox too: held if every one answers 429.
func (t *tenant) buildStorm(ctx context.Context) Verdict {
	full := ""
	for made := 0; made < t.cfg.MaxSandboxes && full == ""; made++ {
		sb, err := t.api.CreateSandbox(ctx, apiv1.CreateSandboxRequest{Template: t.cfg.Template, TimeoutS: 600,
			Metadata: map[string]string{"space-redteam": "server"}})
		switch {
		case err == nil:
			t.madeSandbox(sb.ID)
		case statusOf(err) == http.StatusTooManyRequests:
			full = fmt.Sprintf("the project is at its quota after %d sandboxes of this run (429: %s)", made, err)
		default:
			return failed("fill the project's quota with sandboxes: %v", err)
		}
	}
	if full == "" {
		return skipped("the project took %d sandboxes without a 429: its quota is more than the run's bound (--max-sandboxes); run it with a project held to fewer (space projects set P --max-sandboxes 1 --max-memory-mb 512)", t.cfg.MaxSandboxes)
	}
	t.logf("%s; submitting %d builds at once", full, t.cfg.Builds)
	type answer struct {
		name string
		err  error
	}
	answers := make([]answer, t.cfg.Builds)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := "redteam-storm-" + randomHex(4)
			recipe := fmt.Sprintf("from: minimal\nrun:\n  - sleep %d # %s\n", stormBuildSeconds, name)
			_, err := t.api.CreateTemplate(ctx, apiv1.CreateTemplateRequest{Name: name, Recipe: recipe})
			if err == nil {
				t.madeTemplate(name)
			}
			answers[i] = answer{name, err}
		}()
	}
	wg.Wait()
	var accepted []string
	refused, other := 0, []string{}
	for _, a := range answers {
		switch {
		case a.err == nil:
			accepted = append(accepted, a.name)
		case statusOf(a.err) == http.StatusTooManyRequests:
			refused++
		default:
			other = append(other, a.err.Error())
		}
	}
	switch {
	case len(accepted) > 0:
		return broke("%s, yet %d of %d builds were accepted (%d refused with 429); %d were building at once",
			full, len(accepted), t.cfg.Builds, refused, t.mostBuilding(ctx, accepted))
	case len(other) > 0:
		return failed("%d builds answered neither 202 nor 429: %s", len(other), strings.Join(other, "; "))
	default:
		return held("%s; all %d builds answered 429 (%s)", full, t.cfg.Builds, answers[0].err)
	}
}

// mostBuilding samples the accepted builds for a few seconds and returns
// the most that were building at one time.
func (t *tenant) mostBuilding(ctx context.Context, names []string) int {
	most := 0
	for range 5 {
		n := 0
		for _, name := range names {
			if tpl, err := t.api.GetTemplate(ctx, name); err == nil && tpl.State == apiv1.TemplateBuilding {
				n++
			}
		}
		most = max(most, n)
		if sleepCtx(ctx, t.cfg.poll) != nil {
			break
		}
	}
	return most
}
