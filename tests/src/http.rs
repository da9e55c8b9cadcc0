//! A minimal HTTP/1.1 client for the server tests (std only): one request
//! per connection, chunked bodies decoded, server-sent events split.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};

pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// The `data:` payloads of a server-sent event stream.
    pub fn events(&self) -> Vec<String> {
        self.body.lines().filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:"))).map(str::to_string).collect()
    }
}

/// Send a request with raw body bytes; `headers` are extra `Name: value` lines.
pub fn send(addr: SocketAddr, method: &str, path: &str, headers: &[&str], body: &[u8]) -> Response {
    let mut s = open(addr, method, path, headers, body);
    read_response(&mut BufReader::new(&mut s))
}

pub fn post_json(addr: SocketAddr, path: &str, body: &serde_json::Value) -> Response {
    send(addr, "POST", path, &["Content-Type: application/json"], body.to_string().as_bytes())
}

pub fn get(addr: SocketAddr, path: &str) -> Response {
    send(addr, "GET", path, &[], b"")
}

/// Write a request and return the connection unread (to read part of a
/// stream, then drop it as a client that goes away).
pub fn open(addr: SocketAddr, method: &str, path: &str, headers: &[&str], body: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    s
}

/// Read the status line and headers, returning the status.
pub fn read_head(r: &mut impl BufRead) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status = line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("bad status line {line:?}"));
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        let l = line.trim_end();
        if l.is_empty() {
            return (status, headers);
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
}

/// Read one chunk of a chunked body; `None` at the last.
pub fn read_chunk(r: &mut impl BufRead) -> Option<Vec<u8>> {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let n = usize::from_str_radix(line.trim(), 16).unwrap_or_else(|_| panic!("bad chunk size {line:?}"));
    let mut buf = vec![0; n + 2];
    r.read_exact(&mut buf).unwrap();
    buf.truncate(n);
    (n > 0).then_some(buf)
}

fn read_response(r: &mut impl BufRead) -> Response {
    let (status, headers) = read_head(r);
    let chunked = headers.iter().any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let mut body = Vec::new();
    if chunked {
        while let Some(c) = read_chunk(r) {
            body.extend(c);
        }
    } else {
        r.read_to_end(&mut body).unwrap();
    }
    Response { status, headers, body: String::from_utf8(body).unwrap() }
}
