# needs: net
# git clone over HTTP from the test hosts (dumb HTTP), then commit on top.
git clone -q "http://$NET/repo.git" r
cat r/README
git -C r log --format=%s
echo more >> r/README
git -C r commit -qam local
git -C r log --format=%s | head -1
