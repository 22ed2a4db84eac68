//! A writer for the atomicity test: replaces one file with `write_file` in an endless loop,
//! alternating two contents of the same size, until it is killed. After each completed write it
//! prints `wrote`, so that the test can kill it mid-write without guessing at timings.

use serde_json::json;
use toold_tests::call;

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(root), Some(file), Some(size)) = (args.next(), args.next(), args.next()) else {
        eprintln!("usage: write-loop ROOT FILE SIZE");
        std::process::exit(2);
    };
    let size: usize = size.parse().expect("SIZE is a number");
    let contents = [content('a', size), content('b', size)];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        for round in 0.. {
            let env = toold::Env::new(&root);
            let result = call(
                env,
                "write_file",
                json!({"path": file, "content": contents[round % 2]}),
            )
            .await;
            assert!(result.ok, "write_file failed: {result:?}");
            println!("wrote");
        }
    });
}

/// `size` bytes of `fill` with a marker at the end, so that a torn file cannot pass for whole.
pub fn content(fill: char, size: usize) -> String {
    let mut text = fill.to_string().repeat(size - 5);
    text.push_str("\nEND\n");
    text
}
