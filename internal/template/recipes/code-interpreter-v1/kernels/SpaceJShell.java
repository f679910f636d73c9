// SpaceJShell: the Java evaluator behind java_kernel.py, on the JDK's
// jdk.jshell API. It reads cells from stdin, each a line with its length
// in bytes followed by that many bytes of UTF-8 source, splits a cell into
// snippets with jshell's own completeness analysis, evaluates them in
// order and prints, besides what the program itself prints:
//
//   @@R<value>@@E         the value of the cell's last snippet, if an expression
//   @@X<name>\t<message>  an exception, its stack trace as "|  " lines
//   @@C<message>          a snippet jshell rejected, its diagnostics as "|  " lines
//   <marker>              on stdout and stderr when the cell is done
//
// A cell's evaluation stops at its first failing snippet. SIGINT stops the
// running snippet (JShell.stop), which then fails as an exception.
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.stream.Collectors;
import jdk.jshell.*;
import sun.misc.Signal;

public class SpaceJShell {
    public static void main(String[] args) throws Exception {
        PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        PrintStream err = new PrintStream(new FileOutputStream(FileDescriptor.err), true, StandardCharsets.UTF_8);
        System.setOut(out);
        System.setErr(err);
        JShell shell = JShell.builder().executionEngine("local").out(out).err(err).build();
        Signal.handle(new Signal("INT"), s -> shell.stop());
        SourceCodeAnalysis analysis = shell.sourceCodeAnalysis();
        DataInputStream in = new DataInputStream(new BufferedInputStream(System.in));
        while (true) {
            String header = readLine(in);
            if (header == null) return;
            String[] parts = header.trim().split(" ", 2);
            int n = Integer.parseInt(parts[0]);
            String marker = parts.length > 1 ? parts[1] : "";
            byte[] buf = new byte[n];
            in.readFully(buf);
            run(shell, analysis, new String(buf, StandardCharsets.UTF_8), out);
            out.println(marker);
            out.flush();
            err.println(marker);
            err.flush();
        }
    }

    static String readLine(DataInputStream in) throws IOException {
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        int c;
        while ((c = in.read()) != -1 && c != '\n') b.write(c);
        if (c == -1 && b.size() == 0) return null;
        return b.toString(StandardCharsets.UTF_8);
    }

    static void run(JShell shell, SourceCodeAnalysis analysis, String code, PrintStream out) {
        String rest = code;
        String last = null; // the value of the cell's last snippet, if an expression
        while (!rest.isBlank()) {
            SourceCodeAnalysis.CompletionInfo info = analysis.analyzeCompletion(rest);
            String source;
            if (info.completeness() == SourceCodeAnalysis.Completeness.EMPTY) break;
            if (info.completeness().isComplete()) {
                source = info.source();
                rest = info.remaining();
            } else {
                source = rest; // unfinished: jshell reports what is wrong
                rest = "";
            }
            for (SnippetEvent e : shell.eval(source)) {
                if (e.causeSnippet() != null) continue; // an update of a dependent snippet
                if (e.exception() != null) {
                    Throwable t = e.exception();
                    String name = t instanceof EvalException ? ((EvalException) t).getExceptionClassName() : t.getClass().getName();
                    out.println("@@X" + name + "\t" + oneLine(t.getMessage()));
                    for (StackTraceElement s : t.getStackTrace()) out.println("|      at " + s);
                    return;
                }
                if (e.status() == Snippet.Status.REJECTED) {
                    List<Diag> diags = shell.diagnostics(e.snippet()).collect(Collectors.toList());
                    String first = diags.isEmpty() ? "unresolved or invalid snippet" : diags.get(0).getMessage(null);
                    if (info.completeness() != null && !info.completeness().isComplete() && diags.isEmpty()) first = "unfinished code";
                    out.println("@@C" + oneLine(first));
                    for (Diag d : diags) out.println("|  " + oneLine(d.getMessage(null)));
                    out.println("|  " + oneLine(e.snippet().source()));
                    return;
                }
                boolean expression = e.snippet().kind() == Snippet.Kind.EXPRESSION
                        || e.snippet().subKind() == Snippet.SubKind.TEMP_VAR_EXPRESSION_SUBKIND;
                last = expression ? e.value() : null;
            }
        }
        if (last != null) out.println("@@R" + last + "@@E");
    }

    static String oneLine(String s) {
        return s == null ? "" : s.replace("\n", " ").trim();
    }
}
