//! What a compiler command line is, decided from its arguments alone (response files
//! expanded as the driver expands them): its one output, every operand it compiles or
//! links, whether it links. Invariant: a command is taken only when every file it may
//! read is an operand, in a depfile the compile writes (`reads`), or in the key; anything
//! else is `Why` it runs without the cache, never a guess.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Why a compile ran the real compiler without the cache. `reason` is the stable text
/// report.json counts by; `Display` adds the detail the run's log keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    NotUtf8,
    NoOutput,
    NoOutputDir,
    OutputTwice,
    OutputToStdout,
    NoSource,
    SourceFromStdin,
    SeveralOutputs,
    /// An option that writes files besides `-o`, reads files no depfile lists, or prints
    /// instead of compiling.
    Option {
        arg: String,
        what: &'static str,
    },
    /// An operand in a language whose reads the cache cannot list.
    Operand(String),
    ResponseFile {
        arg: String,
        what: String,
    },
    /// A variable that makes the compiler write a depfile of its own.
    Env(&'static str),
    Terminal,
    NotIdentified {
        name: String,
        path: String,
    },
    Failed,
    NotKept(String),
    CacheUnusable(String),
}

impl Why {
    /// The reason without its detail: what report.json counts by.
    pub fn reason(&self) -> String {
        match self {
            Why::NotUtf8 => "an argument is not UTF-8".into(),
            Why::NoOutput => "no -o".into(),
            Why::NoOutputDir => "the output's directory does not exist".into(),
            Why::OutputTwice => "-o given twice".into(),
            Why::OutputToStdout => "-o -: the output goes to stdout".into(),
            Why::NoSource => "nothing to compile".into(),
            Why::SourceFromStdin => "the source is read from stdin".into(),
            Why::SeveralOutputs => "several outputs (-c or -S with several sources)".into(),
            Why::Option { what, .. } => (*what).into(),
            Why::Operand(_) => {
                "an operand whose reads the cache cannot list (a header, assembly with .include/.incbin, another language)".into()
            }
            Why::ResponseFile { .. } => "a response file that cannot be read".into(),
            Why::Env(v) => format!("{v} is set: the compiler writes a depfile of its own"),
            Why::Terminal => "stdout or stderr is a terminal".into(),
            Why::NotIdentified { .. } => {
                "the compiler on this PATH was not identified before the lock".into()
            }
            Why::Failed => "the compile failed".into(),
            Why::NotKept(_) => "compiled, not kept".into(),
            Why::CacheUnusable(_) => "the cache cannot be used".into(),
        }
    }
}

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Why::Option { arg, what } => write!(f, "`{arg}`: {what}"),
            Why::Operand(p) => write!(f, "`{p}`: {}", self.reason()),
            Why::ResponseFile { arg, what } => write!(f, "`{arg}`: {what}"),
            Why::NotIdentified { name, path } => {
                write!(
                    f,
                    "`{name}` on this PATH is {path}, which was not identified before the lock"
                )
            }
            Why::NotKept(what) => write!(f, "compiled, not kept: {what}"),
            Why::CacheUnusable(what) => write!(f, "the cache cannot be used: {what}"),
            _ => f.write_str(&self.reason()),
        }
    }
}

/// The language of a translation unit, by extension (as the driver decides it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    C,
    Cxx,
    /// `.S`, `.sx`: assembly through the preprocessor (its `#include`s are in the depfile).
    AsmCpp,
    /// `.s`: assembly read as it is. Taken only when it has no `.include` or `.incbin`.
    Asm,
}

impl Lang {
    fn of(p: &Path) -> Option<Lang> {
        let ext = p.extension()?.to_str()?;
        Some(match ext {
            "c" | "i" => Lang::C,
            "cc" | "cp" | "cxx" | "cpp" | "CPP" | "c++" | "C" | "ii" => Lang::Cxx,
            "S" | "sx" => Lang::AsmCpp,
            "s" => Lang::Asm,
            _ => return None,
        })
    }

    /// What `-x` calls it: the search path probe preprocesses an empty file so.
    pub fn x(self) -> &'static str {
        match self {
            Lang::C => "c",
            Lang::Cxx => "c++",
            Lang::AsmCpp | Lang::Asm => "assembler-with-cpp",
        }
    }
}

/// A command the cache can account for.
#[derive(Debug, PartialEq)]
pub struct Shape {
    /// The arguments with every `@file` replaced by what it holds: what the compiler
    /// is run with and what the key hashes.
    pub args: Vec<OsString>,
    /// The index in `args` of the output path (`-o PATH`), or of `-oPATH` (`joined`).
    pub out_at: usize,
    pub joined: bool,
    pub out: PathBuf,
    /// Every translation unit, in order.
    pub units: Vec<(PathBuf, Lang)>,
    /// Other operands (objects, archives, linker scripts): linker inputs.
    pub inputs: Vec<PathBuf>,
    /// Compiles and links (no `-c`, `-S`): the linker runs and lists what it read.
    pub links: bool,
    /// Debug information asked for (`-g`, not `-g0`): the object names its directory.
    pub debug: bool,
}

/// Options whose value is the next argument.
const TAKES_VALUE: &[&str] = &[
    "-I",
    "-D",
    "-U",
    "-include",
    "-imacros",
    "-isystem",
    "-iquote",
    "-idirafter",
    "-iprefix",
    "-iwithprefix",
    "-iwithprefixbefore",
    "-isysroot",
    "--sysroot",
    "-L",
    "-l",
    "-Xlinker",
    "-Xpreprocessor",
    "-Xclang",
    "-T",
    "-u",
    "-z",
    "-e",
    "--param",
    "-target",
    "-arch",
    "-MF",
    "-MT",
    "-MQ",
    "-aux-info",
    "-Xassembler",
];

const WRITES: &str = "writes files besides -o";
const READS: &str = "reads files no depfile lists";
const PRINTS: &str = "prints instead of compiling";
const LANGUAGE: &str = "-x: the language is not the operand's";

/// Options the cache leaves alone, by exact name then by prefix, with why.
const NOT_CACHED: &[(&str, &str)] = &[
    ("-E", PRINTS),
    ("-v", PRINTS),
    ("--version", PRINTS),
    ("--help", PRINTS),
    ("-###", PRINTS),
    ("-fsyntax-only", PRINTS),
    ("--coverage", WRITES),
    ("-ftest-coverage", WRITES),
    ("-fprofile-arcs", WRITES),
    ("-gsplit-dwarf", WRITES),
    ("-fstack-usage", WRITES),
    ("-aux-info", WRITES),
];
const NOT_CACHED_PREFIX: &[(&str, &str)] = &[
    ("-M", "-M…: the compile writes a depfile of its own"),
    ("-x", LANGUAGE),
    ("-B", READS),
    ("-save-temps", WRITES),
    ("-fprofile", WRITES),
    ("-fauto-profile", READS),
    ("-fdump-", WRITES),
    ("-fopt-info", WRITES),
    ("-fplugin", READS),
    ("-specs", READS),
    ("-fsanitize-blacklist", READS),
    ("-fsanitize-ignorelist", READS),
    ("-fdiagnostics-format=sarif-file", WRITES),
    ("-fdiagnostics-format=json-file", WRITES),
    ("-fdiagnostics-add-output", WRITES),
    ("-print-", PRINTS),
    ("-dump", PRINTS),
    ("-ftime-trace", WRITES),
    ("-fcallgraph-info", WRITES),
    (
        "-Wa,",
        "assembler options: what the assembler reads or writes is not listed",
    ),
    (
        "-Xassembler",
        "assembler options: what the assembler reads or writes is not listed",
    ),
];

/// Linker options (after `-Wl,` or `-Xlinker`) that write a file or load code.
const LINKER_WRITES: &[&str] = &[
    "-Map",
    "--Map",
    "--dependency-file",
    "--out-implib",
    "-plugin",
    "--plugin",
    "@",
];

/// What the command is; Err: why it runs without the cache.
pub fn shape(args: &[OsString], cwd: &Path) -> Result<Shape, Why> {
    let args = expand(args, cwd, 0)?;
    let text: Vec<&str> = args
        .iter()
        .map(|a| a.to_str())
        .collect::<Option<_>>()
        .ok_or(Why::NotUtf8)?;
    let mut out = None;
    let (mut units, mut inputs, mut links, mut debug) = (Vec::new(), Vec::new(), true, false);
    let mut i = 0;
    while i < text.len() {
        let a = text[i];
        if a == "-o" {
            let path = text.get(i + 1).ok_or(Why::NoOutput)?;
            if out.replace((i + 1, false, *path)).is_some() {
                return Err(Why::OutputTwice);
            }
            i += 2;
            continue;
        }
        let option = |what| Why::Option {
            arg: a.to_string(),
            what,
        };
        if let Some(path) = a.strip_prefix("-o").filter(|p| !p.is_empty()) {
            if out.replace((i, true, path)).is_some() {
                return Err(Why::OutputTwice);
            }
        } else if a == "-" {
            return Err(Why::SourceFromStdin);
        } else if let Some((_, what)) = NOT_CACHED.iter().find(|(n, _)| *n == a) {
            return Err(option(what));
        } else if let Some((_, what)) = NOT_CACHED_PREFIX.iter().find(|(n, _)| a.starts_with(n)) {
            return Err(option(what));
        } else if a == "-Xlinker" || a.starts_with("-Wl,") {
            let values: Vec<&str> = match a.strip_prefix("-Wl,") {
                Some(v) => v.split(',').collect(),
                None => vec![text.get(i + 1).copied().ok_or(Why::NoOutput)?],
            };
            if values
                .iter()
                .any(|v| LINKER_WRITES.iter().any(|w| v.starts_with(w)))
            {
                return Err(option(WRITES));
            }
            i += usize::from(a == "-Xlinker");
        } else if TAKES_VALUE.contains(&a) {
            text.get(i + 1).ok_or(Why::NoOutput)?;
            i += 1;
        } else if a == "-c" || a == "-S" {
            links = false;
        } else if a.starts_with("-g") {
            debug = a != "-g0";
        } else if !a.starts_with('-') {
            let p = PathBuf::from(a);
            match Lang::of(&p) {
                Some(lang) => units.push((p, lang)),
                None if is_header(&p) || is_other_language(&p) => {
                    return Err(Why::Operand(a.to_string()))
                }
                None => inputs.push(p),
            }
        }
        i += 1;
    }
    let (out_at, joined, out) = out.ok_or(Why::NoOutput)?;
    if out == "-" {
        return Err(Why::OutputToStdout);
    }
    if units.is_empty() {
        return Err(Why::NoSource);
    }
    if !links && units.len() > 1 {
        return Err(Why::SeveralOutputs);
    }
    Ok(Shape {
        out_at,
        joined,
        out: PathBuf::from(out),
        units,
        inputs,
        links,
        debug,
        args,
    })
}

/// A header given as an operand: the driver makes a precompiled header of it.
fn is_header(p: &Path) -> bool {
    let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
    matches!(
        ext,
        "h" | "hh" | "H" | "hp" | "hxx" | "hpp" | "HPP" | "h++" | "tcc"
    )
}

/// Sources of the driver's other languages (Fortran, Objective-C, Ada, D, Go, Modula-2):
/// their `include`s are not in a C depfile.
fn is_other_language(p: &Path) -> bool {
    let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
    matches!(
        ext,
        "m" | "mi"
            | "mm"
            | "M"
            | "mii"
            | "f"
            | "for"
            | "ftn"
            | "F"
            | "FOR"
            | "fpp"
            | "FPP"
            | "FTN"
            | "f90"
            | "f95"
            | "f03"
            | "f08"
            | "F90"
            | "F95"
            | "F03"
            | "F08"
            | "ads"
            | "adb"
            | "d"
            | "di"
            | "dd"
            | "go"
            | "mod"
            | "def"
            | "cu"
            | "cppm"
            | "ixx"
    )
}

/// `args` with each `@file` replaced by the arguments it holds, as the driver reads it
/// (whitespace separates, quotes and backslashes as in a shell without expansions;
/// nested response files too). An `@file` that cannot be read is an operand named so to
/// the driver: not a command the cache takes.
fn expand(args: &[OsString], cwd: &Path, depth: usize) -> Result<Vec<OsString>, Why> {
    let mut out = Vec::with_capacity(args.len());
    for a in args {
        let Some(name) = a.to_str().and_then(|a| a.strip_prefix('@')) else {
            out.push(a.clone());
            continue;
        };
        let arg = a.to_string_lossy().into_owned();
        let failed = |what: String| Why::ResponseFile {
            arg: arg.clone(),
            what,
        };
        if depth > 8 {
            return Err(failed("response files nested too deep".into()));
        }
        let path = cwd.join(name);
        let text = crate::base::fsutil::read_capped(&path, crate::base::fsutil::Cap::DEPFILE)
            .map_err(|e| failed(format!("{e:#}")))?;
        let text = String::from_utf8(text).map_err(|_| failed("not UTF-8".into()))?;
        out.extend(expand(&split_response(&text), cwd, depth + 1)?);
    }
    Ok(out)
}

/// The arguments a response file holds (libiberty's `buildargv` rules).
fn split_response(text: &str) -> Vec<OsString> {
    let (mut args, mut cur, mut any) = (Vec::new(), String::new(), false);
    let (mut squote, mut dquote, mut escape) = (false, false, false);
    for c in text.chars() {
        if escape {
            cur.push(c);
            escape = false;
        } else if c == '\\' {
            escape = true;
            any = true;
        } else if squote {
            if c == '\'' {
                squote = false;
            } else {
                cur.push(c);
            }
        } else if dquote {
            if c == '"' {
                dquote = false;
            } else {
                cur.push(c);
            }
        } else if c == '\'' {
            squote = true;
            any = true;
        } else if c == '"' {
            dquote = true;
            any = true;
        } else if c.is_whitespace() {
            if any || !cur.is_empty() {
                args.push(OsString::from(std::mem::take(&mut cur)));
            }
            any = false;
        } else {
            cur.push(c);
        }
    }
    if any || !cur.is_empty() {
        args.push(OsString::from(cur));
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<OsString> {
        line.split_whitespace().map(OsString::from).collect()
    }

    fn shape_of(line: &str) -> Result<Shape, Why> {
        shape(&args(line), Path::new("/nonexistent"))
    }

    #[test]
    fn compiles_with_one_output_are_taken() {
        let c = shape_of("-shared -O2 -fPIC -Iinc -D X=1 -o /tmp/k.so k.cpp").unwrap();
        assert_eq!(c.out, PathBuf::from("/tmp/k.so"));
        assert_eq!(c.out_at, 7);
        assert!(!c.joined && c.links && !c.debug);
        assert_eq!(c.units, vec![(PathBuf::from("k.cpp"), Lang::Cxx)]);
        let c = shape_of("-c -g -o/tmp/k.o k.c lib.a").unwrap();
        assert!(c.joined && !c.links && c.debug);
        assert_eq!((c.out_at, c.out), (2, PathBuf::from("/tmp/k.o")));
        assert_eq!(c.inputs, vec![PathBuf::from("lib.a")]);
        // A value that looks like a source, after an option that takes one, is not one.
        let c = shape_of("-include pre.h -o k.so k.cc").unwrap();
        assert_eq!(c.units.len(), 1);
        // Several units linked into one program: each is a unit.
        let c = shape_of("a.cpp b.cpp start.S -o prog -Xlinker --version-script -Xlinker v.map")
            .unwrap();
        assert_eq!(c.units.len(), 3);
        assert!(c.inputs.is_empty());
    }

    #[test]
    fn what_the_cache_cannot_account_for_says_why() {
        for (line, why) in [
            ("--version", "prints instead of compiling"),
            ("-o k.so", "nothing to compile"),
            ("a.o b.o -o prog", "nothing to compile"),
            ("-c a.c b.c", "no -o"),
            ("-c a.c b.c -o x.o", "several outputs (-c or -S with several sources)"),
            ("-o a -o b k.c", "-o given twice"),
            ("-E k.c -o k.i", "prints instead of compiling"),
            ("-MD -MF k.d -c k.c -o k.o", "-M…: the compile writes a depfile of its own"),
            ("-x c++ -c k.h -o k.o", "-x: the language is not the operand's"),
            ("-save-temps -c k.c -o k.o", "writes files besides -o"),
            ("-fopt-info-all=o.txt -c k.c -o k.o", "writes files besides -o"),
            ("-fprofile-generate -c k.c -o k.o", "writes files besides -o"),
            ("-gsplit-dwarf -c k.c -o k.o", "writes files besides -o"),
            ("-c - -o k.o", "the source is read from stdin"),
            ("-c k.c -o -", "-o -: the output goes to stdout"),
            ("-B/opt/bin -c k.c -o k.o", "reads files no depfile lists"),
            ("-Wl,-Map=k.map k.c -o k", "writes files besides -o"),
            ("-Xlinker -Map -Xlinker k.map k.c -o k", "writes files besides -o"),
            ("-Wl,--dependency-file=x.d k.c -o k", "writes files besides -o"),
            ("-c k.h -o k.gch", "an operand whose reads the cache cannot list (a header, assembly with .include/.incbin, another language)"),
            ("@/nonexistent/args.rsp", "a response file that cannot be read"),
            ("-c k.c -o", "no -o"),
        ] {
            assert_eq!(shape_of(line).map(|_| ()).unwrap_err().reason(), why, "{line}");
        }
    }

    #[test]
    fn a_response_file_is_read_as_the_driver_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("inner.rsp"), "-DX=\"a b\" 'k.c'\n").unwrap();
        std::fs::write(dir.path().join("args.rsp"), "-O2 -o k.o\n-c @inner.rsp\n").unwrap();
        let c = shape(&args("-g @args.rsp"), dir.path()).unwrap();
        assert_eq!(
            c.args,
            args("-g -O2 -o k.o -c -DX=a_b k.c")
                .into_iter()
                .map(|a| OsString::from(a.to_str().unwrap().replace('_', " ")))
                .collect::<Vec<_>>()
        );
        assert_eq!(c.units, vec![(PathBuf::from("k.c"), Lang::C)]);
    }
}
