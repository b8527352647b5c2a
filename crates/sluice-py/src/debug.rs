//! `DB.stats()` and `DB.gc()` as Python dicts, read from the engine's
//! `Debug` output of `Stats` and `GcStats`: every counter the engine keeps
//! appears, under its Rust field name, without a list here to keep in
//! step with `sluicedb::Stats`.
//!
//! The grammar is the one `#[derive(Debug)]` writes for these types:
//! `Name { field: value, .. }` becomes a dict, `[a, b]` a list, `Some(x)`
//! its `x`, `None` `None`, numbers and booleans themselves, strings their
//! text, and any other bare name (an enum variant) its name as a string.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyNone, PyString};
use pyo3::IntoPyObjectExt;

/// `text` (a `{:?}` rendering) as a Python value.
pub(crate) fn to_py<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    let mut p = Parser {
        py,
        s: text.as_bytes(),
        at: 0,
    };
    let v = p.value()?;
    p.ws();
    if p.at != p.s.len() {
        return Err(p.error("trailing text"));
    }
    Ok(v)
}

struct Parser<'py, 's> {
    py: Python<'py>,
    s: &'s [u8],
    at: usize,
}

impl<'py> Parser<'py, '_> {
    fn error(&self, what: &str) -> PyErr {
        PyValueError::new_err(format!(
            "sluicedb: cannot read the engine's statistics ({what} at byte {})",
            self.at
        ))
    }

    fn ws(&mut self) {
        while self.s.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.at).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: u8) -> PyResult<()> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.error(&format!("expected '{}'", c as char)))
        }
    }

    /// A run of name or number characters.
    fn word(&mut self) -> &str {
        self.ws();
        let start = self.at;
        while self
            .s
            .get(self.at)
            .is_some_and(|c| c.is_ascii_alphanumeric() || b"_.+-".contains(c))
        {
            self.at += 1;
        }
        std::str::from_utf8(&self.s[start..self.at]).unwrap_or("")
    }

    fn value(&mut self) -> PyResult<Bound<'py, PyAny>> {
        let py = self.py;
        match self.peek() {
            Some(b'[') => {
                self.at += 1;
                let list = PyList::empty(py);
                while !self.eat(b']') {
                    list.append(self.value()?)?;
                    if !self.eat(b',') {
                        self.expect(b']')?;
                        break;
                    }
                }
                Ok(list.into_any())
            }
            Some(b'"') => self.string(),
            Some(b'{') => self.fields(),
            Some(_) => {
                let word = self.word().to_owned();
                if word.is_empty() {
                    return Err(self.error("unexpected character"));
                }
                match self.peek() {
                    Some(b'{') => return self.fields(),
                    Some(b'(') => {
                        self.at += 1;
                        let inner = self.value()?;
                        self.expect(b')')?;
                        return Ok(inner);
                    }
                    _ => {}
                }
                let first = word.as_bytes()[0];
                if first.is_ascii_digit() || first == b'-' {
                    if let Ok(n) = word.parse::<i128>() {
                        return n.into_bound_py_any(py);
                    }
                }
                if let Ok(x) = word.parse::<f64>() {
                    return x.into_bound_py_any(py);
                }
                Ok(match word.as_str() {
                    "None" => PyNone::get(py).to_owned().into_any(),
                    "true" => true.into_bound_py_any(py)?,
                    "false" => false.into_bound_py_any(py)?,
                    _ => PyString::new(py, &word).into_any(),
                })
            }
            None => Err(self.error("unexpected end")),
        }
    }

    /// `{ name: value, ... }`, with `..` (non-exhaustive) skipped.
    fn fields(&mut self) -> PyResult<Bound<'py, PyAny>> {
        self.expect(b'{')?;
        let dict = PyDict::new(self.py);
        loop {
            if self.eat(b'}') {
                break;
            }
            if self.eat(b'.') {
                self.expect(b'.')?;
                continue;
            }
            let name = self.word().to_owned();
            if name.is_empty() {
                return Err(self.error("expected a field name"));
            }
            self.expect(b':')?;
            dict.set_item(name, self.value()?)?;
            if !self.eat(b',') {
                self.expect(b'}')?;
                break;
            }
        }
        Ok(dict.into_any())
    }

    /// A `"..."` string with Rust's `Debug` escapes.
    fn string(&mut self) -> PyResult<Bound<'py, PyAny>> {
        self.expect(b'"')?;
        let mut out = String::new();
        let rest = std::str::from_utf8(&self.s[self.at..]).map_err(|_| self.error("bad UTF-8"))?;
        let mut chars = rest.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    self.at += i + 1;
                    return Ok(PyString::new(self.py, &out).into_any());
                }
                '\\' => match chars.next().map(|(_, c)| c) {
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some('r') => out.push('\r'),
                    Some('0') => out.push('\0'),
                    Some('u') => {
                        let hex: String = chars
                            .by_ref()
                            .map(|(_, c)| c)
                            .skip(1)
                            .take_while(|&c| c != '}')
                            .collect();
                        let c = u32::from_str_radix(&hex, 16)
                            .ok()
                            .and_then(char::from_u32)
                            .unwrap_or('\u{fffd}');
                        out.push(c);
                    }
                    Some(c) => out.push(c),
                    None => break,
                },
                c => out.push(c),
            }
        }
        Err(self.error("unterminated string"))
    }
}
