//! The kit's nginx starts from Debian's package and serves its fixed site.

use sluicegate_testkit::nginx::{big_body, TEST_HTML};
use sluicegate_testkit::{http_get, http_request, KeepAliveClient, Nginx};

#[test]
fn nginx_serves_the_test_site() {
    let nginx = Nginx::start();
    let resp = http_get(nginx.addr(), "/hello", &[]);
    assert_eq!(resp.status, 200, "{}", nginx.logs());
    assert_eq!(resp.body, b"ok");

    let mut c = KeepAliveClient::connect(nginx.addr()).unwrap();
    let page = c.get("/test.html").unwrap();
    assert_eq!(page.body.len(), 75);
    assert_eq!(page.body, TEST_HTML.as_bytes());
    let big = c.get("/big").unwrap();
    assert_eq!(big.status, 200);
    assert_eq!(big.body, big_body());

    let headers = http_get(
        nginx.addr(),
        "/headers?q=1",
        &[
            ("Host", "example.test"),
            ("X-Forwarded-For", "10.0.0.1"),
            ("X-Forwarded-Proto", "https"),
        ],
    );
    assert_eq!(
        headers.body_str(),
        "xff=10.0.0.1 host=example.test uri=/headers?q=1 xfp=https xfh=\n"
    );

    let body = vec![b'z'; 3 << 20];
    let upload = http_request(nginx.addr(), "POST", "/upload", &[], &body);
    assert_eq!(upload.status, 200);
    assert_eq!(upload.body_str(), format!("len={}\n", 3 << 20));
}
