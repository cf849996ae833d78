#!/bin/bash
# benchmarks/ext_objhash.sh OUT, on the GPU host after `h200_image.sh extbuild`: the objects the build in
# the tree has finished (in ninja's log), copied, normalized as the recipe does (objnorm) and hashed into
# OUT/h_objs.txt, to compare with the build host's own objects of the same build.
out=${1:?OUT}
here=$(cd "$(dirname "$0")/.." && pwd)
ext=${EXT:-/root/extbuild}
echo "elapsed $(( $(date +%s) - $(cat $ext/started) )) s" | tee "$out/h_summary.txt"
log=$(find "$ext/src" -name .ninja_log | head -1)
cp "$log" "$out/ninja_log.txt"
rm -rf /root/objs && mkdir -p /root/objs
awk 'NR > 1 && $4 ~ /\.o$/ {print $4}' "$log" | sort -u | while read -r f; do
  rel=${f#/build/}
  mkdir -p "/root/objs/$(dirname "$rel")" && cp -p "$ext/$rel" "/root/objs/$rel"
done
PYTHONPATH=$here python3 "$here/verlenv/image/objnorm.py" /root/objs | tee -a "$out/h_summary.txt"
(cd /root/objs && find . -name '*.o' -exec sha256sum {} + | sort -k2) > "$out/h_objs.txt"
wc -l < "$out/h_objs.txt" | tee -a "$out/h_summary.txt"
nproc >> "$out/h_summary.txt"
tail -n 3 "$ext/build.log"
