package bench

import (
	"fmt"
	"sort"
	"strings"
)

// lifecycleKeys are measured together on one filled sandbox.
var lifecycleKeys = []string{KeyPauseResume, KeySuspend, KeyResumeSuspended, KeySnapshot, KeyBranch}

// skipGroups are shorthands accepted by ParseSkip besides the keys.
var skipGroups = map[string][]string{
	"create":    {KeyCreatePooled, KeyCreateUnpooled, KeyCreateFirstExec},
	"lifecycle": lifecycleKeys,
	"baselines": {KeyBaselineRunscRun, KeyBaselineRunscRestore, KeyBaselineQEMUKernel, KeyBaselineQEMUBoot},
	"floors":    {KeyFloorCreatePooled, KeyFloorExecRTT, KeyFloorFile1MiB, KeyFloorAttachStream},
}

// Keys lists every measurement key in result order, of every runtime.
func Keys() []string {
	var keys []string
	for _, f := range (&Result{}).latencyFields() {
		keys = append(keys, f.key)
	}
	return append(keys, KeyAttachStream, KeyFloorAttachStream, KeyThroughput, KeyChurn, KeyDensity)
}

// ParseSkip turns a comma-separated list of measurement keys and group
// names (create, lifecycle, baselines, floors) into the set of keys to
// skip. A skipped figure takes its floor with it: the floor is measured on
// the figure's sandbox or alongside its samples.
func ParseSkip(list string) (map[string]bool, error) {
	known := map[string]bool{}
	for _, k := range Keys() {
		known[k] = true
	}
	skip := map[string]bool{}
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		switch {
		case item == "":
		case known[item]:
			skip[item] = true
		case skipGroups[item] != nil:
			for _, k := range skipGroups[item] {
				skip[k] = true
			}
		default:
			groups := make([]string, 0, len(skipGroups))
			for g := range skipGroups {
				groups = append(groups, g)
			}
			sort.Strings(groups)
			return nil, fmt.Errorf("unknown measurement %q (known: %s; groups: %s)",
				item, strings.Join(Keys(), ", "), strings.Join(groups, ", "))
		}
	}
	for figure, floor := range floorOf {
		if skip[figure] {
			skip[floor] = true
		}
	}
	return skip, nil
}
