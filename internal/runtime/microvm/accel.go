package microvm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"github.com/space-platform/space/internal/hostpath"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ProbeBound is how long the probe guest may take to print its marker
// under KVM. A healthy KVM host boots it in well under a second (TCG,
// which emulates every instruction, in about two); on a nested PVM host
// a stock kernel hangs, and QEMU is killed at the bound.
const ProbeBound = 20 * time.Second

const probeMarker = "SPACE-PROBE-OK"

// ChooseAccel decides the acceleration: "tcg" and "kvm" as asked (kvm
// only if /dev/kvm opens), "auto" (or "") KVM only when /dev/kvm opens
// and a probe guest boots under it within ProbeBound, else TCG, said in
// one log line.
func ChooseAccel(ctx context.Context, qemu string, k Kernel, mode string, workDir string, log *slog.Logger) (string, error) {
	switch mode {
	case "tcg":
		return "tcg", nil
	case "kvm":
		if err := openKVM(); err != nil {
			return "", fmt.Errorf("microvm: --accel kvm: %w", err)
		}
		return "kvm", nil
	case "", "auto":
	default:
		return "", fmt.Errorf("microvm: unknown acceleration %q (auto, kvm or tcg)", mode)
	}
	if err := openKVM(); err != nil {
		log.Info("microvm: no KVM, guests run under TCG emulation", "reason", err.Error())
		return "tcg", nil
	}
	took, err := Probe(ctx, qemu, k, "kvm", workDir, ProbeBound)
	if err != nil {
		log.Warn("microvm: KVM probe guest failed, guests run under TCG emulation", "reason", err.Error(), "after", took.Round(time.Millisecond).String())
		return "tcg", nil
	}
	log.Info("microvm: guests run under KVM", "probe", took.Round(time.Millisecond).String())
	return "kvm", nil
}

func openKVM() error {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("open /dev/kvm: %w", hostpath.Pathless(err))
	}
	return f.Close()
}

// Probe boots the kernel with an initramfs whose init prints a marker on
// the console and reboots (which ends QEMU, -no-reboot), under accel, and
// returns how long the marker took. QEMU is killed at bound: a probe never
// hangs.
func Probe(ctx context.Context, qemu string, k Kernel, accel, workDir string, bound time.Duration) (time.Duration, error) {
	if err := os.MkdirAll(workDir, 0o700); err != nil {
		return 0, err
	}
	initrd := filepath.Join(workDir, "probe.cpio")
	var buf bytes.Buffer
	c := newCPIOWriter(&buf)
	c.Dir("dev", 0o755)
	c.CharDev("dev/console", 0o600, 5, 1)
	c.File("init", 0o755, probeInit(probeMarker+"\n"))
	if err := c.Close(); err != nil {
		return 0, err
	}
	if err := os.WriteFile(initrd, buf.Bytes(), 0o600); err != nil {
		return 0, err
	}
	acc, cpu := "tcg", "max"
	cmdline := "console=ttyS0 panic=-1 quiet reboot=t"
	if accel == "kvm" {
		acc, cpu = "kvm", "host"
	} else if khz := hostTSCkHz(); khz > 0 {
		cmdline += " tsc_early_khz=" + strconv.Itoa(khz) // see kernelCmdline
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu,
		"-machine", "microvm", "-accel", acc, "-cpu", cpu,
		"-m", "128M", "-smp", "1", "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
		"-kernel", k.Image(accel), "-initrd", initrd,
		"-append", cmdline,
		"-serial", "stdio")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Cancel = func() error { return cmd.Process.Kill() }
	cmd.WaitDelay = 2 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("probe: %w", err)
	}
	seen := make(chan time.Duration, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), probeMarker) {
				seen <- time.Since(start)
				return
			}
		}
	}()
	var took time.Duration
	ok := false
	select {
	case took = <-seen:
		ok = true
	case <-ctx.Done():
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if !ok {
		if ctx.Err() != nil {
			return time.Since(start), fmt.Errorf("probe guest printed nothing within %s (killed)", bound)
		}
		return time.Since(start), fmt.Errorf("probe guest ended without its marker: %s", strings.TrimSpace(stderr.String()))
	}
	return took, nil
}

// probeInit returns a static x86-64 ELF executable that writes msg to
// stdout (the console) and reboots: the smallest init there is, so the
// probe measures the hypervisor, not userspace.
func probeInit(msg string) []byte {
	const base = 0x400000
	const hdrLen = 64 + 56
	code := []byte{
		0xb8, 0x01, 0, 0, 0, // mov eax, 1 (write)
		0xbf, 0x01, 0, 0, 0, // mov edi, 1
		0x48, 0x8d, 0x35, 0, 0, 0, 0, // lea rsi, [rip+msg]
		0xba, byte(len(msg)), 0, 0, 0, // mov edx, len
		0x0f, 0x05, // syscall
		0xb8, 0xa9, 0, 0, 0, // mov eax, 169 (reboot)
		0xbf, 0xad, 0xde, 0xe1, 0xfe, // mov edi, LINUX_REBOOT_MAGIC1
		0xbe, 0x69, 0x19, 0x12, 0x28, // mov esi, LINUX_REBOOT_MAGIC2
		0xba, 0x67, 0x45, 0x23, 0x01, // mov edx, LINUX_REBOOT_CMD_RESTART
		0x0f, 0x05, // syscall
		0xeb, 0xfe, // jmp . (never reached)
	}
	// rip-relative displacement: from the end of the lea to msg.
	binary.LittleEndian.PutUint32(code[13:], uint32(len(code)-17))
	body := append(code, msg...)
	total := hdrLen + len(body)
	b := make([]byte, hdrLen, total)
	copy(b, []byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0})
	le := binary.LittleEndian
	le.PutUint16(b[16:], 2)    // ET_EXEC
	le.PutUint16(b[18:], 0x3e) // x86-64
	le.PutUint32(b[20:], 1)
	le.PutUint64(b[24:], base+hdrLen) // entry
	le.PutUint64(b[32:], 64)          // program headers
	le.PutUint16(b[52:], 64)
	le.PutUint16(b[54:], 56)
	le.PutUint16(b[56:], 1)
	ph := b[64:]
	le.PutUint32(ph[0:], 1)     // PT_LOAD
	le.PutUint32(ph[4:], 5)     // R+X
	le.PutUint64(ph[16:], base) // vaddr
	le.PutUint64(ph[24:], base)
	le.PutUint64(ph[32:], uint64(total))
	le.PutUint64(ph[40:], uint64(total))
	le.PutUint64(ph[48:], 0x1000)
	return append(b, body...)
}
