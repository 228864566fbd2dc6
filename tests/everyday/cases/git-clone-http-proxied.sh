# needs: net
# jail: --net proxied
# The same clone through the proxied mode's HTTP proxy.
git clone -q "http://$NET/repo.git" r
cat r/README
git -C r log --format=%s
