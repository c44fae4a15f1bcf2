# Varnish (Debian's 7.1) as a reference cache: @LISTEN@ -> @UPSTREAM_HOST@:@UPSTREAM_PORT@
# Only the backend: the built-in VCL does the rest (GET and HEAD looked
# up; the upstream's Cache-Control / Expires give lifetimes; concurrent
# misses of a key wait for one fetch). A hit's X-Varnish has two ids.
# Render: sed -e 's|@UPSTREAM_HOST@|127.0.0.1|' -e 's|@UPSTREAM_PORT@|...|'
# Run:    varnishd -F -j none -T none -n /a/scratch/dir -a @LISTEN@ -f rendered.vcl \
#           -s malloc,256m -p thread_pools=1 -p default_ttl=0 -p default_grace=0
#         (pin with taskset; -j none: no jail, runs as the caller, root or not;
#          default_ttl=0: nothing stored without a lifetime; default_grace=0:
#          no stale answers while refreshing, as sluicegate without
#          stale_while_revalidate)
vcl 4.1;

backend origin {
    .host = "@UPSTREAM_HOST@";
    .port = "@UPSTREAM_PORT@";
}
