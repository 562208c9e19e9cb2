//! `cargo run -p fuseprof-analyzer --example analyze -- run.sqlite [op|shape|module|kernel|class] [--json]`:
//! the analyzer without the CLI, for trying it on a store.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: analyze RUN.sqlite [op|shape|module|kernel|class] [--json] [--step K]");
        std::process::exit(2);
    };
    let mut cfg = fuseprof_analyzer::AnalyzeConfig::default();
    let mut json = false;
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => json = true,
            "--step" => cfg.step = it.next().and_then(|s| s.parse().ok()),
            other => match fuseprof_analyzer::GroupBy::parse(other) {
                Some(by) => cfg.by = by,
                None => {
                    eprintln!("unknown argument {other:?}");
                    std::process::exit(2);
                }
            },
        }
    }
    match fuseprof_analyzer::analyze_file(std::path::Path::new(path), &cfg) {
        Ok(a) if json => println!("{}", serde_json::to_string_pretty(&a).unwrap()),
        Ok(a) => print!("{}", fuseprof_analyzer::render_text(&a, &cfg)),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
