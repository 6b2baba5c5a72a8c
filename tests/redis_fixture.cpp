#include "tests/redis_fixture.h"

#include <doctest/doctest.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "tests/test_models.h"

namespace cedar::test {

namespace {
std::string FindRedisServer() {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  p += ":/usr/sbin:/sbin";
  size_t start = 0;
  while (start <= p.size()) {
    const size_t end = p.find(':', start);
    const std::string dir = p.substr(start, end == std::string::npos ? std::string::npos : end - start);
    const std::string candidate = dir + "/redis-server";
    if (!dir.empty() && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return "";
}
}  // namespace

void RequireRedisServer() {
  if (!FindRedisServer().empty()) return;
  std::fprintf(stderr,
               "SKIP: redis-server is not installed (apt-get install redis-server; scripts/setup.sh lists it): "
               "the remote cache tier's tests need a private Redis\n");
  std::exit(77);
}

RedisServer::RedisServer() {
  RequireRedisServer();
  dir_ = TempDir("redis");
  socket_ = dir_ + "/r.sock";
  Start();
}

RedisServer::~RedisServer() { Kill(); }

void RedisServer::Start() {
  REQUIRE(pid_ < 0);
  const std::string bin = FindRedisServer();
  std::filesystem::remove(socket_);
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  REQUIRE(pid_ >= 0);
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
    if (::getppid() != parent) ::_exit(1);
    const std::string log = dir_ + "/redis.log";
    ::execl(bin.c_str(), bin.c_str(), "--port", "0", "--unixsocket", socket_.c_str(), "--unixsocketperm", "700", "--save",
            "", "--appendonly", "no", "--dir", dir_.c_str(), "--logfile", log.c_str(), "--daemonize", "no",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Ready when it answers PING on the socket (it creates the socket when it listens).
  for (int i = 0; i < 500; ++i) {
    redisContext* c = redisConnectUnix(socket_.c_str());
    if (c && !c->err) {
      auto* r = static_cast<redisReply*>(redisCommand(c, "PING"));
      const bool ok = r && r->type == REDIS_REPLY_STATUS;
      if (r) freeReplyObject(r);
      redisFree(c);
      if (ok) return;
    } else if (c) {
      redisFree(c);
    }
    int status = 0;
    const std::string why = "redis-server exited at start; see " + dir_ + "/redis.log";
    REQUIRE_MESSAGE(::waitpid(pid_, &status, WNOHANG) == 0, why);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FAIL("redis-server did not answer PING on " << socket_ << " within 5 s");
}

void RedisServer::Kill() {
  if (pid_ < 0) return;
  ::kill(pid_, SIGCONT);
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

void RedisServer::Pause() { REQUIRE(::kill(pid_, SIGSTOP) == 0); }
void RedisServer::Resume() { REQUIRE(::kill(pid_, SIGCONT) == 0); }

std::string RedisServer::Command(const std::vector<std::string>& argv) {
  redisContext* c = redisConnectUnix(socket_.c_str());
  REQUIRE_MESSAGE((c && !c->err), "cannot connect to the test's redis-server");
  std::vector<const char*> a;
  std::vector<size_t> len;
  for (const std::string& s : argv) {
    a.push_back(s.data());
    len.push_back(s.size());
  }
  auto* r = static_cast<redisReply*>(redisCommandArgv(c, int(a.size()), a.data(), len.data()));
  REQUIRE(r != nullptr);
  std::string out;
  if (r->type == REDIS_REPLY_INTEGER) out = std::to_string(r->integer);
  else if (r->type == REDIS_REPLY_NIL) out = "(nil)";
  else if (r->str) out = std::string(r->str, r->len);
  freeReplyObject(r);
  redisFree(c);
  return out;
}

std::vector<std::string> RedisServer::Keys(const std::string& pattern) {
  redisContext* c = redisConnectUnix(socket_.c_str());
  REQUIRE_MESSAGE((c && !c->err), "cannot connect to the test's redis-server");
  auto* r = static_cast<redisReply*>(redisCommand(c, "KEYS %s", pattern.c_str()));
  REQUIRE(r != nullptr);
  std::vector<std::string> keys;
  for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; ++i)
    keys.emplace_back(r->element[i]->str, r->element[i]->len);
  freeReplyObject(r);
  redisFree(c);
  return keys;
}

}  // namespace cedar::test
