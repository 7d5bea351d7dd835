# median(list): the median of a space-separated list of numbers. The A/B
# scripts prepend it to their own program text.
function median(list,   n, arr, i, j, t) {
  n = split(list, arr, " ")
  for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (arr[j] + 0 < arr[i] + 0) { t = arr[i]; arr[i] = arr[j]; arr[j] = t }
  return arr[int((n + 1) / 2)]
}
