//! PROXY protocol v1 and v2 parsing: valid headers, every malformed form.

use super::*;

fn sa(s: &str) -> Option<SocketAddr> {
    Some(s.parse().unwrap())
}

fn complete(buf: &[u8]) -> (usize, Option<SocketAddr>, Option<SocketAddr>) {
    match parse(buf) {
        Ok(Parsed::Complete {
            len,
            source,
            destination,
        }) => (len, source, destination),
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
    }
}

/// Every strict prefix of `header` is Partial, the whole is Complete
/// with its length, and bytes after it change nothing.
fn check_prefixes(header: &[u8]) {
    for k in 0..header.len() {
        assert_eq!(parse(&header[..k]), Ok(Parsed::Partial), "prefix {k}");
    }
    let (len, src, dst) = complete(header);
    assert_eq!(len, header.len());
    let mut more = header.to_vec();
    more.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(complete(&more), (len, src, dst));
}

fn v2(ver_cmd: u8, fam: u8, body: &[u8]) -> Vec<u8> {
    let mut v = V2_SIG.to_vec();
    v.push(ver_cmd);
    v.push(fam);
    v.extend_from_slice(&(body.len() as u16).to_be_bytes());
    v.extend_from_slice(body);
    v
}

fn v4_block() -> Vec<u8> {
    let mut b = vec![192, 0, 2, 1, 198, 51, 100, 7];
    b.extend_from_slice(&51000u16.to_be_bytes());
    b.extend_from_slice(&443u16.to_be_bytes());
    b
}

fn v6_block() -> Vec<u8> {
    let src: Ipv6Addr = "2001:db8::1".parse().unwrap();
    let dst: Ipv6Addr = "2001:db8::2:3".parse().unwrap();
    let mut b = src.octets().to_vec();
    b.extend_from_slice(&dst.octets());
    b.extend_from_slice(&1234u16.to_be_bytes());
    b.extend_from_slice(&80u16.to_be_bytes());
    b
}

fn tlv(t: u8, value: &[u8]) -> Vec<u8> {
    let mut v = vec![t];
    v.extend_from_slice(&(value.len() as u16).to_be_bytes());
    v.extend_from_slice(value);
    v
}

#[test]
fn v1_tcp4() {
    let h = b"PROXY TCP4 192.0.2.1 198.51.100.7 51000 443\r\n";
    assert_eq!(
        complete(h),
        (h.len(), sa("192.0.2.1:51000"), sa("198.51.100.7:443"))
    );
    check_prefixes(h);
    check_prefixes(b"PROXY TCP4 0.0.0.0 255.255.255.255 0 65535\r\n");
}

#[test]
fn v1_tcp6() {
    let h = b"PROXY TCP6 2001:db8::1 ::ffff:192.0.2.9 1 65535\r\n";
    assert_eq!(
        complete(h),
        (
            h.len(),
            sa("[2001:db8::1]:1"),
            sa("[::ffff:192.0.2.9]:65535")
        )
    );
    check_prefixes(h);
}

#[test]
fn v1_longest() {
    let h = b"PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
    assert_eq!(h.len(), 104);
    check_prefixes(h);
}

#[test]
fn v1_unknown() {
    assert_eq!(complete(b"PROXY UNKNOWN\r\n"), (15, None, None));
    check_prefixes(b"PROXY UNKNOWN\r\n");
    let h = b"PROXY UNKNOWN ffff::1 whatever else 1 2\r\n";
    assert_eq!(complete(h), (h.len(), None, None));
    check_prefixes(h);
    // Up to 107 bytes in all.
    let mut h = b"PROXY UNKNOWN ".to_vec();
    h.resize(105, b'x');
    h.extend_from_slice(b"\r\n");
    check_prefixes(&h);
    h.insert(20, b'x');
    assert_eq!(parse(&h), Err(ProxyError::V1TooLong));
    assert_eq!(parse(&h[..107]), Err(ProxyError::V1TooLong));
    assert_eq!(parse(&h[..106]), Ok(Parsed::Partial));
}

#[test]
fn v1_malformed() {
    let cases: &[(&[u8], ProxyError)] = &[
        (b"GET / HTTP/1.1\r\n", ProxyError::NotProxy),
        (b"POST / HTTP/1.1\r\n", ProxyError::NotProxy),
        (b"PROXY\r\n", ProxyError::NotProxy),
        (b"proxy TCP4 1.2.3.4 5.6.7.8 1 2\r\n", ProxyError::NotProxy),
        (
            b"PROXY  TCP4 1.2.3.4 5.6.7.8 1 2\r\n",
            ProxyError::V1Protocol,
        ),
        (
            b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n",
            ProxyError::V1Protocol,
        ),
        (
            b"PROXY tcp4 1.2.3.4 5.6.7.8 1 2\r\n",
            ProxyError::V1Protocol,
        ),
        (b"PROXY UNKNOWNX\r\n", ProxyError::V1Protocol),
        (b"PROXY \r\n", ProxyError::V1Protocol),
        (b"PROXY TCP4\r\n", ProxyError::V1Fields),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", ProxyError::V1Fields),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n", ProxyError::V1Fields),
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n",
            ProxyError::V1Fields,
        ),
        (b"PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n", ProxyError::V1Fields),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1  2\r\n", ProxyError::V1Fields),
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 65536\r\n",
            ProxyError::V1Port,
        ),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n", ProxyError::V1Port),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 00 2\r\n", ProxyError::V1Port),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 +2\r\n", ProxyError::V1Port),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 -2\r\n", ProxyError::V1Port),
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 99999\r\n",
            ProxyError::V1Port,
        ),
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 100000\r\n",
            ProxyError::V1Port,
        ),
        (
            b"PROXY TCP4 1.2.3.04 5.6.7.8 1 2\r\n",
            ProxyError::V1Address,
        ),
        (
            b"PROXY TCP4 1.2.3.256 5.6.7.8 1 2\r\n",
            ProxyError::V1Address,
        ),
        (b"PROXY TCP4 1.2.3 5.6.7.8 1 2\r\n", ProxyError::V1Address),
        (
            b"PROXY TCP4 1.2.3.4.5 5.6.7.8 1 2\r\n",
            ProxyError::V1Address,
        ),
        (b"PROXY TCP4 a.b.c.d 5.6.7.8 1 2\r\n", ProxyError::V1Address),
        (b"PROXY TCP4 ::1 ::2 1 2\r\n", ProxyError::V1FamilyMismatch),
        (
            b"PROXY TCP4 1.2.3.4 ::2 1 2\r\n",
            ProxyError::V1FamilyMismatch,
        ),
        (
            b"PROXY TCP6 1.2.3.4 ::2 1 2\r\n",
            ProxyError::V1FamilyMismatch,
        ),
        (
            b"PROXY TCP6 ::1 5.6.7.8 1 2\r\n",
            ProxyError::V1FamilyMismatch,
        ),
        (b"PROXY TCP6 ::g ::2 1 2\r\n", ProxyError::V1Address),
        (
            b"PROXY TCP6 fe80::1%eth0 ::2 1 2\r\n",
            ProxyError::V1Address,
        ),
        (b"PROXY TCP6 [::1] ::2 1 2\r\n", ProxyError::V1Address),
        (
            b"PROXY TCP6 1:2:3:4:5:6:7:8:9 ::2 1 2\r\n",
            ProxyError::V1Address,
        ),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", ProxyError::V1LineEnd),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX", ProxyError::V1LineEnd),
        (
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\r\n",
            ProxyError::V1LineEnd,
        ),
        (b"PROXY UNKNOWN\n", ProxyError::V1LineEnd),
    ];
    for (input, want) in cases {
        assert_eq!(
            parse(input),
            Err(*want),
            "{:?}",
            String::from_utf8_lossy(input)
        );
        // The error shows up as soon as the offending byte arrives, and
        // no later byte changes it.
        let first_err = (0..=input.len())
            .find(|&k| parse(&input[..k]).is_err())
            .unwrap();
        for k in first_err..=input.len() {
            assert!(parse(&input[..k]).is_err(), "{input:?} at {k}");
        }
    }
}

#[test]
fn v1_fails_early() {
    // Plain HTTP is refused on its first byte...
    assert_eq!(parse(b"G"), Err(ProxyError::NotProxy));
    assert_eq!(parse(b"PU"), Err(ProxyError::NotProxy));
    // ...and bad fields as soon as they cannot become valid.
    assert_eq!(parse(b"PROXY X"), Err(ProxyError::V1Protocol));
    assert_eq!(parse(b"PROXY TCP4 1"), Ok(Parsed::Partial));
    assert_eq!(parse(b"PROXY TCP4 256"), Err(ProxyError::V1Address));
    assert_eq!(parse(b"PROXY TCP4 1.2.3.4 5.6.7.8 0"), Ok(Parsed::Partial));
    assert_eq!(
        parse(b"PROXY TCP4 1.2.3.4 5.6.7.8 00"),
        Err(ProxyError::V1Port)
    );
    assert_eq!(
        parse(b"PROXY TCP4 1.2.3.4 5.6.7.8 65536"),
        Err(ProxyError::V1Port)
    );
    assert_eq!(
        parse(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 "),
        Err(ProxyError::V1Fields)
    );
    assert_eq!(parse(b"PROXY TCP6 ::z"), Err(ProxyError::V1Address));
    assert_eq!(
        parse(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r"),
        Ok(Parsed::Partial)
    );
    assert_eq!(parse(b"PROXY TCP4 1.2.3.4\r"), Err(ProxyError::V1Fields));
    // No CRLF within 107 bytes.
    let mut long = b"PROXY TCP6 ".to_vec();
    long.resize(200, b'1');
    assert_eq!(parse(&long[..56]), Ok(Parsed::Partial));
    assert_eq!(parse(&long[..57]), Err(ProxyError::V1Address));
    assert_eq!(parse(&long), Err(ProxyError::V1TooLong));
    let mut unknown = b"PROXY UNKNOWN ".to_vec();
    unknown.resize(200, b'a');
    assert_eq!(parse(&unknown[..106]), Ok(Parsed::Partial));
    assert_eq!(parse(&unknown[..107]), Err(ProxyError::V1TooLong));
    assert_eq!(parse(&unknown), Err(ProxyError::V1TooLong));
    unknown[105] = b'\r';
    unknown[106] = b'\n';
    assert_eq!(complete(&unknown).0, 107);
    unknown[105] = b'a';
    unknown[106] = b'\r';
    unknown[107] = b'\n';
    assert_eq!(parse(&unknown[..107]), Err(ProxyError::V1TooLong));
}

#[test]
fn v2_proxy_ipv4() {
    let h = v2(0x21, 0x11, &v4_block());
    assert_eq!(
        complete(&h),
        (28, sa("192.0.2.1:51000"), sa("198.51.100.7:443"))
    );
    check_prefixes(&h);
}

#[test]
fn v2_proxy_ipv4_with_tlvs() {
    let mut body = v4_block();
    body.extend(tlv(0x01, b"h2"));
    body.extend(tlv(0x04, &[0; 0]));
    body.extend(tlv(0x20, &[1, 0, 0, 0, 0]));
    let h = v2(0x21, 0x11, &body);
    assert_eq!(
        complete(&h),
        (h.len(), sa("192.0.2.1:51000"), sa("198.51.100.7:443"))
    );
    check_prefixes(&h);
}

#[test]
fn v2_proxy_ipv6_with_tlvs() {
    let mut body = v6_block();
    body.extend(tlv(0x02, b"api.example.com"));
    body.extend(tlv(0x04, &[0; 40]));
    let h = v2(0x21, 0x21, &body);
    assert_eq!(
        complete(&h),
        (h.len(), sa("[2001:db8::1]:1234"), sa("[2001:db8::2:3]:80"))
    );
    check_prefixes(&h);
}

#[test]
fn v2_local() {
    let h = v2(0x20, 0x00, &[]);
    assert_eq!(complete(&h), (16, None, None));
    check_prefixes(&h);
    // The family byte and block are ignored after LOCAL.
    let h = v2(0x20, 0x11, &v4_block());
    assert_eq!(complete(&h), (28, None, None));
    check_prefixes(&h);
    let h = v2(0x20, 0xff, &[9, 9]);
    assert_eq!(complete(&h), (18, None, None));
}

#[test]
fn v2_unspec_and_fallbacks() {
    let h = v2(0x21, 0x00, &[]);
    assert_eq!(complete(&h), (16, None, None));
    check_prefixes(&h);
    // UNSPEC: the block is skipped whole, TLV-shaped or not.
    let h = v2(0x21, 0x00, &[0xff, 0xff]);
    assert_eq!(complete(&h), (18, None, None));
    // DGRAM and AF_UNIX fall back to UNSPEC.
    assert_eq!(complete(&v2(0x21, 0x12, &v4_block())), (28, None, None));
    assert_eq!(complete(&v2(0x21, 0x22, &v6_block())), (52, None, None));
    assert_eq!(complete(&v2(0x21, 0x31, &[0; 216])), (232, None, None));
    assert_eq!(complete(&v2(0x21, 0x32, &[0; 216])), (232, None, None));
    check_prefixes(&v2(0x21, 0x31, &[7; 216]));
}

#[test]
fn v2_limit() {
    let body = {
        let mut b = v4_block();
        b.extend(tlv(0x04, &vec![0; V2_MAX_LEN - 16 - 12 - 3]));
        b
    };
    let h = v2(0x21, 0x11, &body);
    assert_eq!(h.len(), V2_MAX_LEN);
    assert_eq!(complete(&h).0, V2_MAX_LEN);
    let mut body = body;
    body.push(0);
    // Refused as soon as the length is read.
    let h = v2(0x21, 0x00, &body);
    assert_eq!(parse(&h[..16]), Err(ProxyError::V2TooLong(V2_MAX_LEN + 1)));
    let mut h = v2(0x21, 0x11, &[]);
    h[14] = 0xff;
    h[15] = 0xff;
    assert_eq!(parse(&h), Err(ProxyError::V2TooLong(16 + 65535)));
}

#[test]
fn v2_malformed() {
    let cases: Vec<(Vec<u8>, ProxyError)> = vec![
        (v2(0x11, 0x11, &v4_block()), ProxyError::V2Version(1)),
        (v2(0x31, 0x11, &v4_block()), ProxyError::V2Version(3)),
        (v2(0x01, 0x11, &v4_block()), ProxyError::V2Version(0)),
        (v2(0x22, 0x11, &v4_block()), ProxyError::V2Command(2)),
        (v2(0x2f, 0x11, &v4_block()), ProxyError::V2Command(15)),
        (v2(0x21, 0x10, &v4_block()), ProxyError::V2Family(0x10)),
        (v2(0x21, 0x13, &v4_block()), ProxyError::V2Family(0x13)),
        (v2(0x21, 0x01, &v4_block()), ProxyError::V2Family(0x01)),
        (v2(0x21, 0x41, &v4_block()), ProxyError::V2Family(0x41)),
        (
            v2(0x21, 0x11, &v4_block()[..11]),
            ProxyError::V2ShortAddress { len: 11, need: 12 },
        ),
        (
            v2(0x21, 0x21, &v4_block()),
            ProxyError::V2ShortAddress { len: 12, need: 36 },
        ),
        (
            v2(0x21, 0x31, &[0; 100]),
            ProxyError::V2ShortAddress {
                len: 100,
                need: 216,
            },
        ),
        (
            v2(0x21, 0x11, &[v4_block(), vec![1, 0]].concat()),
            ProxyError::V2Tlv,
        ),
        (
            v2(
                0x21,
                0x11,
                &[v4_block(), vec![1, 0, 3, b'a', b'b']].concat(),
            ),
            ProxyError::V2Tlv,
        ),
        (
            v2(
                0x21,
                0x21,
                &[v6_block(), tlv(1, b"ok"), vec![4, 0xff, 0xff]].concat(),
            ),
            ProxyError::V2Tlv,
        ),
    ];
    for (input, want) in &cases {
        assert_eq!(parse(input), Err(*want), "{input:?}");
        let first_err = (0..=input.len())
            .find(|&k| parse(&input[..k]).is_err())
            .unwrap();
        for k in first_err..=input.len() {
            assert!(parse(&input[..k]).is_err(), "{input:?} at {k}");
        }
    }
    // Errors in the fixed part are seen before the rest arrives.
    assert_eq!(
        parse(&v2(0x11, 0x11, &[])[..13]),
        Err(ProxyError::V2Version(1))
    );
    assert_eq!(
        parse(&v2(0x21, 0x99, &[])[..14]),
        Err(ProxyError::V2Family(0x99))
    );
    // A TLV overrunning the length is seen from its own header.
    let h = v2(
        0x21,
        0x11,
        &[v4_block(), vec![4, 0, 200], vec![0; 10]].concat(),
    );
    assert_eq!(parse(&h[..31]), Err(ProxyError::V2Tlv));
    assert_eq!(parse(&h[..30]), Ok(Parsed::Partial));
    // A broken signature.
    let mut h = v2(0x21, 0x11, &v4_block());
    h[11] = b'X';
    assert_eq!(parse(&h), Err(ProxyError::NotProxy));
    assert_eq!(parse(b"\r\n\r\n\r\n"), Err(ProxyError::NotProxy));
    assert_eq!(parse(b"\r\n\r\n"), Ok(Parsed::Partial));
}

#[test]
fn errors_display() {
    let all = [
        ProxyError::NotProxy,
        ProxyError::V1TooLong,
        ProxyError::V1LineEnd,
        ProxyError::V1Protocol,
        ProxyError::V1Fields,
        ProxyError::V1Address,
        ProxyError::V1FamilyMismatch,
        ProxyError::V1Port,
        ProxyError::V2Version(1),
        ProxyError::V2Command(2),
        ProxyError::V2Family(0x13),
        ProxyError::V2TooLong(5000),
        ProxyError::V2ShortAddress { len: 3, need: 12 },
        ProxyError::V2Tlv,
    ];
    for e in all {
        let s = e.to_string();
        assert!(
            s.starts_with("PROXY") || s.starts_with("not a PROXY"),
            "{s}"
        );
    }
    assert_eq!(
        ProxyError::V2Family(0x13).to_string(),
        "PROXY v2 header with unknown family/protocol 0x13"
    );
}
