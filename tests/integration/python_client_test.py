#!/usr/bin/python3
"""A Python client of the catalog, generated from catalog/proto/catalog.proto with Debian's
protoc and grpc_python_plugin, talks to a real gfcatalogd over mutual TLS + a user token
(as catalog/README.md, "Other languages: Python", documents), and what it writes is what
the C++ tools (gfls, gfstat) see, and the other way round.

  python_client_test.py SOURCE_DIR BIN_DIR

Debian 12: python3-grpcio 1.51 and python3-protobuf 4.21 (= protobuf 3.21, the protoc here).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SRC, BIN = sys.argv[1], sys.argv[2]
PLUGIN = "/usr/bin/grpc_python_plugin"


def run(argv, env=None, check=True):
    r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(argv)}: exit {r.returncode}\n{r.stdout}{r.stderr}")
    return r


def main(tmp):
    # 1. Stubs from the .proto (the command catalog/README.md gives).
    gen = os.path.join(tmp, "gen")
    os.makedirs(gen)
    run(["protoc", f"--proto_path={SRC}", f"--python_out={gen}", f"--grpc_python_out={gen}",
         f"--plugin=protoc-gen-grpc_python={PLUGIN}", os.path.join(SRC, "catalog/proto/catalog.proto")])
    sys.path.insert(0, gen)
    import grpc  # noqa: E402  (Debian python3-grpcio)
    import google.protobuf  # noqa: E402
    from catalog.proto import catalog_pb2, catalog_pb2_grpc  # noqa: E402
    print(f"grpcio {grpc.__version__}, protobuf {google.protobuf.__version__}")

    # 2. A catalog with mutual TLS and user tokens (gfca: CA, catalog and admin certificates,
    # token.key), as in production.
    ca = os.path.join(tmp, "ca")
    for args in (["init"], ["issue", "catalog", "cat", "--host", "127.0.0.1"], ["issue", "admin", "root"]):
        run([os.path.join(BIN, "gfca"), *args, "--dir", ca])
    catalog = subprocess.Popen(
        [os.path.join(BIN, "gfcatalogd"), "--db", os.path.join(tmp, "db"), "--listen", "127.0.0.1:0",
         "--tls-cert", os.path.join(ca, "cat.pem"), "--tls-key", os.path.join(ca, "cat.key"),
         "--tls-client-ca", os.path.join(ca, "ca.pem"), "--token-key", os.path.join(ca, "token.key"),
         "--no-planner"],
        stdout=subprocess.PIPE, stderr=open(os.path.join(tmp, "gfcatalogd.err"), "w"), text=True)
    try:
        line = catalog.stdout.readline()
        assert line.startswith("listening on "), f"gfcatalogd: {line!r}, " + open(os.path.join(tmp, "gfcatalogd.err")).read()
        address = line.split()[-1]
        check_client(address, ca, grpc, catalog_pb2, catalog_pb2_grpc)
    finally:
        catalog.send_signal(signal.SIGTERM)
        try:
            catalog.wait(30)
        except subprocess.TimeoutExpired:
            catalog.kill()
            catalog.wait()


def check_client(address, ca, grpc, pb, pb_grpc):
    admin = dict(os.environ, GFREP_CATALOG=address, GFREP_CATALOG_CA=os.path.join(ca, "ca.pem"),
                 GFREP_CERT=os.path.join(ca, "root.pem"), GFREP_KEY=os.path.join(ca, "root.key"))
    admin.pop("GFREP_TOKEN", None)
    admin.pop("GFREP_TOKEN_FILE", None)
    tool = lambda name, *args, **kw: run([os.path.join(BIN, name), *args], env=admin, **kw)  # noqa: E731
    # The admin gives alice a home (only admins create at the top), C++ side.
    tool("gfmkdir", "-p", "/home/alice")
    tool("gfchown", "alice", "/home/alice")
    tool("gfmkdir", "/home/alice/from-cpp")
    token = tool("gfauth", "token", "create", "alice", "--scope", "read,write", "--ttl", "1h",
                 "--key", os.path.join(ca, "token.key")).stdout.splitlines()[0].strip()
    assert token.startswith("gfrep1."), token

    with open(os.path.join(ca, "ca.pem"), "rb") as f:
        tls = grpc.ssl_channel_credentials(root_certificates=f.read())

    # Without a token (and no certificate) the catalog refuses: authentication is real.
    with grpc.secure_channel(address, tls) as channel:
        anonymous = pb_grpc.CatalogStub(channel)
        try:
            anonymous.Stat(pb.PathRequest(path="/home/alice"), timeout=10)
            raise AssertionError("an anonymous Stat succeeded")
        except grpc.RpcError as e:
            assert e.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED), e
            assert "no user token" in e.details(), e.details()
            print(f"anonymous: {e.code().name}: {e.details()}")

    # The token as call credentials: "authorization: Bearer TOKEN", as the C++ tools send it.
    creds = grpc.composite_channel_credentials(tls, grpc.access_token_call_credentials(token))
    with grpc.secure_channel(address, creds) as channel:
        stub = pb_grpc.CatalogStub(channel)
        made = stub.Mkdir(pb.MkdirRequest(path="/home/alice/py", mode=0o750), timeout=10)
        assert made.type == pb.Attributes.DIRECTORY and made.owner == "alice", made
        content = pb.FileContent(size=12345, checksum_algo="xxh128", checksum="00112233445566778899aabbccddeeff",
                                 mode=0o640)
        created = stub.CreateFile(pb.CreateFileRequest(path="/home/alice/py/data.bin", content=content), timeout=10)
        assert created.type == pb.Attributes.FILE and created.size == 12345, created
        stat = stub.Stat(pb.PathRequest(path="/home/alice/py/data.bin"), timeout=10)
        assert (stat.inode, stat.size, stat.owner) == (created.inode, 12345, "alice"), stat
        listed = stub.List(pb.ListRequest(path="/home/alice"), timeout=10)
        names = sorted(e.name for e in listed.entries)
        # What the C++ tool made, Python sees.
        assert names == ["from-cpp", "py"], names
        cpp_dir = [e for e in listed.entries if e.name == "from-cpp"][0]
        assert cpp_dir.attributes.type == pb.Attributes.DIRECTORY, cpp_dir
        # Errors are gRPC status codes (catalog/catalog.h).
        try:
            stub.Stat(pb.PathRequest(path="/home/alice/absent"), timeout=10)
            raise AssertionError("Stat of an absent path succeeded")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.NOT_FOUND, (e.code(), e.details())
        # alice's token may not write outside her home (the namespace's modes).
        try:
            stub.Mkdir(pb.MkdirRequest(path="/not-hers"), timeout=10)
            raise AssertionError("Mkdir /not-hers succeeded")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.PERMISSION_DENIED, (e.code(), e.details())

    # What Python made, the C++ tools see.
    ls = tool("gfls", "/home/alice/py").stdout.split()
    assert ls == ["data.bin"], ls
    seen = json.loads(tool("gfstat", "--json", "/home/alice/py/data.bin").stdout.splitlines()[0])
    assert seen["size"] == 12345 and seen["owner"] == "alice" and seen["inode"] == created.inode, seen
    assert seen["mode"] == "0640" and seen["checksum"] == "00112233445566778899aabbccddeeff", seen
    print("PASS: Python client (generated stubs) and C++ tools agree")


if __name__ == "__main__":
    for tool in ("protoc", PLUGIN):
        if shutil.which(tool) is None:
            sys.exit(f"FAIL: {tool} not found (tools/setup-deps: protobuf-compiler, protobuf-compiler-grpc)")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gfrep-python-client-") as tmp:
        main(tmp)
    print(f"{time.monotonic() - started:.1f} s")
