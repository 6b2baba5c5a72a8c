// A private redis-server for a test: started in a temp directory on a Unix socket only (no TCP
// port, no persistence), killed when the fixture is destroyed (and, through PR_SET_PDEATHSIG,
// when the test process dies). When redis-server is not installed, RequireRedisServer() prints
// why and exits 77, which ctest reports as skipped (SKIP_RETURN_CODE, tests/remote.cmake).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

struct redisContext;

namespace cedar::test {

// Exits 77 (skipped) with a message when no redis-server binary is on PATH.
void RequireRedisServer();

class RedisServer {
 public:
  RedisServer();   // starts it and waits until it answers PING (REQUIRE on failure)
  ~RedisServer();  // kills it
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  std::string url() const { return "unix://" + socket_; }
  const std::string& socket() const { return socket_; }

  void Kill();     // SIGKILL and wait: Redis is gone, its data with it
  void Start();    // a fresh (empty) one on the same socket
  void Pause();    // SIGSTOP: Redis is slow (never answers) until Resume
  void Resume();   // SIGCONT

  // One command through a fresh hiredis connection; returns the reply as text (integers and
  // status replies too; an error reply as "ERR ..."). REQUIREs a reachable Redis.
  std::string Command(const std::vector<std::string>& argv);
  std::vector<std::string> Keys(const std::string& pattern);

 private:
  std::string dir_, socket_;
  pid_t pid_ = -1;
};

}  // namespace cedar::test
